"""The view of an array a researcher reads at the end of a sweep (`csctl get array ID`): one
row per task with its overrides, phase, reason and final loss and evaluation, sortable."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from appliance.domain.arrays import collapsed_indices
from appliance.domain.errors import InvalidSpec
from appliance.domain.phases import Phase

SORT_KEYS = ("index", "loss", "eval", "accuracy")
T = TypeVar("T")
# A listed job's place among queued array tasks: (array id, index, cap), None for any other.
QueuedTask = Callable[[T], "tuple[str, int, int] | None"]


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


def collapse_queued(
    jobs: Sequence[T], queued_task: QueuedTask[T], renamed: Callable[[T, str], T]
) -> list[T]:
    """A listing as squeue shows arrays: the queued tasks of an array as one row, named
    `wsjob-…_[3-5,9%2]` (the first of them, renamed, where it stood); running and ended tasks
    and other jobs as themselves. `queued_task` says which rows are queued tasks."""
    places = [queued_task(job) for job in jobs]
    indices: dict[str, list[int]] = {}
    for place in places:
        if place is not None:
            indices.setdefault(place[0], []).append(place[1])
    out: list[T] = []
    done: set[str] = set()
    for job, place in zip(jobs, places, strict=True):
        if place is None or len(indices[place[0]]) == 1:
            out.append(job)
        elif place[0] not in done:
            done.add(place[0])
            array_id, _, cap = place
            spans = collapsed_indices(indices[array_id])
            out.append(renamed(job, f"{array_id}_{spans[:-1]}{f'%{cap}' if cap else ''}]"))
    return out
