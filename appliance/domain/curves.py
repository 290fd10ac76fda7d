"""A job's curves: the training and evaluation points its chief appends to `metrics.jsonl` in
its model directory (workers/summaries.py: one JSON object a line, a `step` with `loss` and
`learning_rate`, or with `eval_loss` and `eval_accuracy`).

The file is the owner's and may hold anything, so every line is checked and one that is not a
point (a partial last line being written, a line too long, text that is not JSON, a value that
is not a finite number) is skipped, never an error. One model directory can hold more than one
run: a job resumed from a checkpoint appends from the step after it, and a later job may append
from its first step again. A point at a step not after the last of its kind starts a new run
there: the points of the old run from that step on are dropped (a training point drops both
kinds, an evaluation only evaluations), so the curves are the newest run's. Each line names
the job that wrote it (`job`): a job's curves stop at its own last line, and when a later job
started over in the same directory (moving this one's files to earlier_runs/<n>/) they are read
there (services/job_curves.py). Beyond
`MAX_POINTS` points of a kind, the curve is thinned evenly (its first and last kept).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable
from typing import TypeVar

METRICS_FILE = "metrics.jsonl"
MAX_POINTS = 2_000  # per curve: more than a chart's width in pixels
MAX_LINE = 4_096  # bytes: a line of metrics.jsonl is about a hundred
MAX_STEP = 1 << 62

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class TrainPoint:
    step: int
    loss: float
    learning_rate: float


@dataclasses.dataclass(frozen=True)
class EvalPoint:
    step: int
    loss: float
    accuracy: float  # the fraction of predictions that were right


@dataclasses.dataclass(frozen=True)
class Curves:
    """The newest run's points, in step order; `thinned`: some were left out (MAX_POINTS, or
    a file read in parts); `problem`: why the file could not be read ("": it could, or there
    is none yet)."""

    train: tuple[TrainPoint, ...] = ()
    evals: tuple[EvalPoint, ...] = ()
    thinned: bool = False
    problem: str = ""


def curves_from_lines(
    lines: Iterable[bytes], *, partial: bool = False, job: str = ""
) -> Curves | None:
    """The curves of metrics.jsonl's lines, in file order (`partial`: only parts of the file
    were read, so the curves are thinned). With `job`: the curves as they stood at that job's
    last line (what later jobs appended is not its history), None when the lines name jobs
    and none of them is `job` (its run is elsewhere); lines that name no job (written before
    they did) are all read."""
    points = [_point(line) for line in lines]
    named = [tag for tag, _ in points if tag]
    if job and named:
        if job not in named:
            return None
        last = max(i for i, (tag, _) in enumerate(points) if tag == job)
        points = points[: last + 1]
    train: list[TrainPoint] = []
    evals: list[EvalPoint] = []
    for _, point in points:
        if isinstance(point, TrainPoint):
            _drop_from(train, point.step)
            _drop_from(evals, point.step)
            train.append(point)
        elif isinstance(point, EvalPoint):
            _drop_from(evals, point.step)
            evals.append(point)
    thinned = partial or len(train) > MAX_POINTS or len(evals) > MAX_POINTS
    return Curves(tuple(thin(train)), tuple(thin(evals)), thinned)


def _drop_from(points: list[TrainPoint] | list[EvalPoint], step: int) -> None:
    """Drop the points at `step` and after (they are in step order: from the end)."""
    while points and points[-1].step >= step:
        points.pop()


def _point(line: bytes) -> tuple[str, TrainPoint | EvalPoint | None]:
    """The job a line names ("" if none) and its point (None if it is not one)."""
    if len(line) > MAX_LINE:
        return "", None
    try:
        fields = json.loads(line)
    except ValueError:  # not JSON, or not UTF-8
        return "", None
    if not isinstance(fields, dict):
        return "", None
    job = fields.get("job")
    tag = job if isinstance(job, str) else ""
    step = fields.get("step")
    if type(step) is not int or not 0 <= step <= MAX_STEP:
        return tag, None
    if "eval_loss" in fields:
        loss, accuracy = _number(fields.get("eval_loss")), _number(fields.get("eval_accuracy"))
        if loss is None or accuracy is None:
            return tag, None
        return tag, EvalPoint(step, loss, accuracy)
    loss, learning_rate = _number(fields.get("loss")), _number(fields.get("learning_rate"))
    if loss is None or learning_rate is None:
        return tag, None
    return tag, TrainPoint(step, loss, learning_rate)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def thin(points: list[T], most: int = MAX_POINTS) -> list[T]:
    """At most `most` of `points`, evenly spaced, the first and the last kept."""
    if len(points) <= most:
        return points
    last = len(points) - 1
    return [points[round(i * last / (most - 1))] for i in range(most)]
