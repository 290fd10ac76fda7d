"""Job arrays and sweeps (Slurm's `--array`): the syntax, the grid, and the tasks' ids.

An array is one submit that makes N jobs, its tasks, each with an index: `--array 0-31%4`
(ranges `0-31`, lists `1,3,7`, steps `0-15:4`, and `%N`: at most N of them run at once). A
sweep is an array over a grid of params overrides: `optimizer.learning_rate=1e-3,3e-3` and
`train_input.batch_size=64,128` make four tasks, indexed 0-3 in the grid's order (keys in
sorted order, the last varying fastest). Every input is bounded before it is expanded: an
array of more than MAX_ARRAY_TASKS tasks, or an index over MAX_ARRAY_INDEX, is refused by
arithmetic on the text, never by building it.

A task's id is its array's id and its index: `wsjob-<array>_<index>` (domain/ids.py). The
index reaches the params (`${array_task_id}` in a value) and the replicas' environment.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
from collections.abc import Mapping
from typing import Any

from appliance.domain.errors import InvalidSpec

MAX_ARRAY_TASKS = 1000  # Slurm's MaxArraySize is 1001 by default
MAX_ARRAY_INDEX = 99_999
MAX_ARRAY_CHARS = 256
MAX_SWEEP_KEYS = 16
MAX_SWEEP_KEY_CHARS = 128
MAX_SWEEP_VALUES_CHARS = 16_384
MAX_SWEEP_DEPTH = 4
TASK_ID_PLACEHOLDER = "${array_task_id}"
_DIGITS = frozenset("0123456789")


@dataclasses.dataclass(frozen=True)
class ArrayRequest:
    """An array as asked for: its indices (ascending, distinct; empty: those of a sweep's
    grid) and the cap on how many run at once (0: none)."""

    indices: tuple[int, ...] = ()
    cap: int = 0


@dataclasses.dataclass(frozen=True)
class ArrayTask:
    """One task of an array: its index and the params overrides of its grid point (key →
    value as given; empty for a plain array)."""

    index: int
    overrides: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class TaskOf:
    """A job's place in its array: the array's id, its index, the array's cap of tasks running
    at once (0: none) and its sweep overrides (key → value as given)."""

    array_id: str
    index: int
    cap: int = 0
    overrides: Mapping[str, str] = dataclasses.field(default_factory=dict)


def _number(text: str, what: str) -> int:
    """A non-negative index, bounded before int() reads it."""
    if not text or len(text) > 6 or not set(text) <= _DIGITS:
        shown = repr(text) if len(text) <= 16 else f"{text[:16]!r}... ({len(text)} characters)"
        raise InvalidSpec(
            f"array: {what} {shown} must be a whole number from 0 to {MAX_ARRAY_INDEX}",
            field="array",
        )
    value = int(text)
    if value > MAX_ARRAY_INDEX:
        raise InvalidSpec(
            f"array: index {value} is over the largest, {MAX_ARRAY_INDEX}", field="array"
        )
    return value


def parse_array(text: str) -> ArrayRequest:
    """Slurm's array syntax (`0-31%4`, `1,3,7`, `0-15:4`, `%4` alone for a sweep's cap), or
    InvalidSpec naming `array`. Counted before expanded: at most MAX_ARRAY_TASKS tasks."""
    if len(text) > MAX_ARRAY_CHARS:
        raise InvalidSpec(f"array must be at most {MAX_ARRAY_CHARS} characters", field="array")
    body, percent, cap_text = text.strip().partition("%")
    cap = 0
    if percent:
        cap_text = cap_text.strip()
        cap = int(cap_text) if cap_text.isascii() and cap_text.isdigit() else 0
        if len(cap_text) > 6 or not 1 <= cap <= MAX_ARRAY_TASKS:  # one sentence for any bad cap
            raise InvalidSpec(
                f"array: the cap after % must be a whole number from 1 to {MAX_ARRAY_TASKS}, "
                f"got {cap_text[:16]!r}",
                field="array",
            )
    body = body.strip()
    if not body:
        if not percent:
            raise InvalidSpec("array is empty; e.g. 0-31%4, 1,3,7 or 0-15:4", field="array")
        return ArrayRequest((), cap)
    parts: list[tuple[int, int, int]] = []
    count = 0
    for part in body.split(","):
        span, colon, step_text = part.strip().partition(":")
        first, dash, last = span.partition("-")
        lo = _number(first.strip(), "index")
        hi = _number(last.strip(), "index") if dash else lo
        step = _number(step_text.strip(), "step") if colon else 1
        if colon and not dash:
            raise InvalidSpec(
                f"array: a step needs a range, as in 0-15:4 ({part.strip()[:32]!r})",
                field="array",
            )
        if hi < lo or step < 1:
            raise InvalidSpec(
                f"array: {part.strip()[:32]!r} must be a range from low to high with a step of at "
                "least 1",
                field="array",
            )
        count += (hi - lo) // step + 1
        if count > MAX_ARRAY_TASKS:
            raise InvalidSpec(
                f"array has more than {MAX_ARRAY_TASKS} tasks; submit fewer at once",
                field="array",
            )
        parts.append((lo, hi, step))
    indices = sorted({i for lo, hi, step in parts for i in range(lo, hi + 1, step)})
    return ArrayRequest(tuple(indices), cap)


def parse_sweep(sweep: Mapping[str, str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """`{"optimizer.learning_rate": "1e-3,3e-3"}` as ((key, values), ...) in key order, or
    InvalidSpec naming `sweep`. The grid's size is counted before anything is expanded."""
    if len(sweep) > MAX_SWEEP_KEYS:
        raise InvalidSpec(f"sweep may vary at most {MAX_SWEEP_KEYS} keys", field="sweep")
    axes: list[tuple[str, tuple[str, ...]]] = []
    points = 1
    for key in sorted(sweep):
        values_text = sweep[key]
        if not isinstance(key, str) or not isinstance(values_text, str):
            raise InvalidSpec(
                "sweep must map params keys to comma-separated values", field="sweep"
            )
        shown = key[:MAX_SWEEP_KEY_CHARS]
        path = key.split(".")
        if (
            len(key) > MAX_SWEEP_KEY_CHARS
            or not 2 <= len(path) <= MAX_SWEEP_DEPTH + 1
            or not all(p.strip() == p and p for p in path)
        ):
            raise InvalidSpec(
                f"sweep: key {shown!r} must be a params key as section.key (e.g. "
                f"optimizer.learning_rate), at most {MAX_SWEEP_KEY_CHARS} characters",
                field="sweep",
            )
        if len(values_text) > MAX_SWEEP_VALUES_CHARS:
            raise InvalidSpec(f"sweep: the values of {key} are too long", field="sweep")
        values = tuple(v.strip() for v in values_text.split(","))
        if not values_text.strip() or not all(values):
            raise InvalidSpec(
                f"sweep: {key} needs comma-separated values, none empty (e.g. {key}=1,2)",
                field="sweep",
            )
        if len(set(values)) != len(values):
            raise InvalidSpec(f"sweep: {key} names a value twice", field="sweep")
        points *= len(values)
        if points > MAX_ARRAY_TASKS:
            raise InvalidSpec(
                f"sweep makes more than {MAX_ARRAY_TASKS} tasks (the grid is the product of "
                "every key's values); sweep fewer values",
                field="sweep",
            )
        axes.append((key, values))
    return tuple(axes)


def array_tasks(array: str, sweep: Mapping[str, str]) -> tuple[tuple[ArrayTask, ...], int]:
    """The tasks a submit's `array` and `sweep` make, and the cap (0: none); no task when
    neither is given. With a sweep, `array` may give only the cap (`%4`)."""
    request = parse_array(array) if array else ArrayRequest()
    if not sweep:
        if array and not request.indices:  # "%4" alone: a sweep's cap, with no sweep to cap
            raise InvalidSpec(
                "array: a cap alone (%N) is for a sweep; give the indices too, e.g. 0-31%4",
                field="array",
            )
        return tuple(ArrayTask(i) for i in request.indices), request.cap
    if request.indices:
        raise InvalidSpec(
            "array: with a sweep the tasks are the grid's points; give only a cap, e.g. %4",
            field="array",
        )
    axes = parse_sweep(sweep)
    keys = [key for key, _ in axes]
    grid = itertools.product(*(values for _, values in axes))
    tasks = tuple(
        ArrayTask(i, dict(zip(keys, point, strict=True))) for i, point in enumerate(grid)
    )
    return tasks, request.cap


def scalar(text: str) -> Any:
    """A sweep value as params hold it: an integer, a number (`1e-3` too, which YAML 1.1
    reads as text), true/false, else the text."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) else text


def task_params(params: Mapping[str, Any], task: ArrayTask) -> dict[str, Any]:
    """`params` for `task`: its overrides set (section.key, nested keys made as needed) and
    every `${array_task_id}` in a text value replaced by its index (a value that is only the
    placeholder becomes the index as a number)."""
    out: dict[str, Any] = copy.deepcopy(dict(params))
    for key, value in task.overrides.items():
        *path, last = key.split(".")
        node = out
        for part in path:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise InvalidSpec(f"sweep: {key}: {part} is not a section", field="sweep")
            node = child
        node[last] = scalar(value)
    substituted = _substitute(out, task.index)
    assert isinstance(substituted, dict)
    return substituted


def as_a_task(params: dict[str, Any], text: str) -> dict[str, Any]:
    """`params` (parsed from `text`) as a task's would be, to check them: `${array_task_id}`
    replaced by an index (the params themselves when they do not mention it)."""
    return task_params(params, ArrayTask(0)) if TASK_ID_PLACEHOLDER in text else params


def _substitute(value: Any, index: int) -> Any:
    if isinstance(value, str):
        if value == TASK_ID_PLACEHOLDER:
            return index
        return value.replace(TASK_ID_PLACEHOLDER, str(index))
    if isinstance(value, dict):
        return {k: _substitute(v, index) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, index) for v in value]
    return value


def task_id(array_id: str, index: int) -> str:
    """`wsjob-<array>_<index>`."""
    return f"{array_id}_{index}"


def checked_array_id(text: str) -> str:
    """`text` if it can be an array's id (`wsjob-…`, no task index), else InvalidSpec naming
    `array`."""
    if len(text) > 64 or not text.startswith("wsjob-") or "_" in text:
        raise InvalidSpec(
            f"array {text[:80]!r} is not an array id; array ids look like wsjob-0a1b2c3d4e5f6g",
            field="array",
        )
    return text


def array_of(job_id: str) -> tuple[str, int] | None:
    """(array id, index) of a task's id; None for a job that is no array's task."""
    array_id, sep, index = job_id.rpartition("_")
    if not sep or not index or not set(index) <= _DIGITS or len(index) > 6:
        return None
    return array_id, int(index)


ARRAY_JOB_ID_ENV = "APPLIANCE_ARRAY_JOB_ID"
ARRAY_TASK_ID_ENV = "APPLIANCE_ARRAY_TASK_ID"


def array_environment(job_id: str) -> dict[str, str]:
    """What a task's replicas (the chief's too) find in their environment: its array's id and
    its index (Slurm's SLURM_ARRAY_JOB_ID and SLURM_ARRAY_TASK_ID); nothing for other jobs."""
    found = array_of(job_id)
    if found is None:
        return {}
    return {ARRAY_JOB_ID_ENV: found[0], ARRAY_TASK_ID_ENV: str(found[1])}


def collapsed_indices(indices: list[int]) -> str:
    """`[0-3,7,9-12]`: the indices as squeue shows pending tasks."""
    spans: list[str] = []
    for _, group in itertools.groupby(enumerate(sorted(indices)), lambda p: p[1] - p[0]):
        run = [i for _, i in group]
        spans.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return "[" + ",".join(spans) + "]"
