"""The view of an array a researcher reads at the end of a sweep (`csctl get array ID`): one
row per task with its overrides, phase, reason and final loss and evaluation, sortable."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

from appliance.domain.errors import InvalidSpec
from appliance.domain.phases import Phase

SORT_KEYS = ("index", "loss", "eval", "accuracy")


@dataclasses.dataclass(frozen=True)
class ArrayTaskRow:
    """One task: its job, index, overrides, phase, reason (and code), the last step it
    reached with its loss (None: no curve yet) and its last evaluation (None: none)."""

    job_id: str
    index: int
    overrides: Mapping[str, str]
    phase: Phase
    reason: str = ""
    reason_code: str = ""
    step: int = 0
    loss: float | None = None
    eval_loss: float | None = None
    eval_accuracy: float | None = None


@dataclasses.dataclass(frozen=True)
class ArrayView:
    """An array: its id, owner, cap of tasks running at once (0: none) and its tasks."""

    array_id: str
    user: str
    cap: int
    tasks: tuple[ArrayTaskRow, ...]


def sorted_tasks(tasks: Iterable[ArrayTaskRow], by: str = "index") -> list[ArrayTaskRow]:
    """The rows by index, or best first by final loss (`loss`), eval loss (`eval`) or eval
    accuracy (`accuracy`, highest first); tasks without the value last, by index."""
    if by not in SORT_KEYS:
        raise InvalidSpec(f"sort {by!r} is not one of {', '.join(SORT_KEYS)}", field="sort")
    rows = list(tasks)
    if by == "index":
        return sorted(rows, key=lambda r: r.index)

    def key(row: ArrayTaskRow) -> tuple[bool, float, int]:
        value = {"loss": row.loss, "eval": row.eval_loss, "accuracy": row.eval_accuracy}[by]
        if value is None or math.isnan(value):
            return (True, 0.0, row.index)
        return (False, -value if by == "accuracy" else value, row.index)

    return sorted(rows, key=key)


def array_document(view: ArrayView, rows: Iterable[ArrayTaskRow]) -> dict[str, Any]:
    """The view as plain data, its tasks as `rows` orders them (csctl's JSON and YAML and
    REST's body alike)."""
    return {
        "array_id": view.array_id,
        "user": view.user,
        "cap": view.cap,
        "tasks": [
            {**dataclasses.asdict(r), "overrides": dict(r.overrides), "phase": r.phase.value}
            for r in rows
        ],
    }
