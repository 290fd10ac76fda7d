"""The job tables: `csctl get jobs` (its columns, and how `--sort-by` orders jobs: by a column,
or by a field of the job's `-o json` document, as kubectl sorts by a JSONPath) and
`csctl get job ID -o table`."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

from appliance.domain.elastic import size_text
from appliance.domain.job import Job
from appliance.domain.phases import Phase
from appliance.domain.spec import JobSpec, checkpoint_path_of
from appliance.domain.wafer import execution_strategy_of
from csctl.render import (
    ATTEMPT_COLUMNS,
    REPLICA_COLUMNS,
    Table,
    attempt_row,
    format_age,
    format_labels,
    format_table,
    replica_row,
)

# `csctl get jobs`, like the real csctl's list plus the job's type and priority.
# CSX: how many CS-2s: `8`, or an elastic job's size now and range, `4 (2-8)`.
JOB_COLUMNS = (
    "NAME", "AGE", "DURATION", "PHASE", "TYPE", "PRIORITY", "CSX", "SYSTEMS", "USER", "LABELS",
)  # fmt: skip
# --show-pending adds where a queued job stands and when it is estimated to start.
PENDING_COLUMNS = (*JOB_COLUMNS, "PENDING", "START(EST)")
# REASON: the code of why the job waits (its pending reason), else of why it ended.
# How `csctl get job` says a job's execution strategy.
EXECUTION_SAID = {
    "pipeline": "pipelined (one CS-2 holds the model; no MemoryX, no SwarmX)",
    "weight_streaming": "weight streaming (MemoryX holds the model, SwarmX streams it)",
}
WIDE_COLUMNS = (*JOB_COLUMNS, "REASON", "QUEUE", "STEP", "RESTARTS", "PENDING", "START(EST)")


def age(job: Job, now: float) -> str:
    return format_age(now - job.created_at) if job.created_at else "-"


def duration(job: Job, now: float) -> str:
    """How long the job has run (RUNNING until it ended, or until now); `-` before it ran."""
    return format_age(_ran(job, now)) if job.started_at else "-"


def _ran(job: Job, now: float) -> float:
    if not job.started_at:
        return -1.0
    return (job.finished_at or now) - job.started_at


def pending_text(job: Job, now: float = 0.0) -> str:
    if not job.pending_reason:
        return ""
    if job.queue_position:
        return f"#{job.queue_position}: {job.pending_reason}"
    return job.pending_reason


def reason_code(job: Job, now: float = 0.0) -> str:
    """The code of what the job waits for, else of why it ended or was last requeued: the
    code `--reason` filters on (`-` for none)."""
    return job.pending_reason_code or job.reason_code or "-"


def estimated_start(job: Job, now: float) -> str:
    """`~5m3s` from now (an estimate; `now` when it is due); `-` when none was made."""
    start = job.estimated_start
    if job.phase is not Phase.QUEUED or not start:
        return "-"
    return "~" + format_age(max(0.0, start - now))


@dataclasses.dataclass(frozen=True)
class Column:
    """A column: its cell, and the key `--sort-by` orders by (ascending)."""

    cell: Callable[[Job, float], str]
    key: Callable[[Job, float], Any]


def _text(cell: Callable[[Job, float], str]) -> Column:
    return Column(cell, cell)


COLUMNS: dict[str, Column] = {
    "NAME": _text(lambda j, now: j.id),
    "AGE": Column(age, lambda j, now: -j.created_at),
    "DURATION": Column(duration, _ran),
    "PHASE": _text(lambda j, now: j.phase.value),
    "TYPE": _text(lambda j, now: j.spec.mode.value),
    "PRIORITY": Column(lambda j, now: j.spec.priority.name, lambda j, now: j.spec.priority),
    "CSX": Column(
        lambda j, now: size_text(len(j.systems), j.spec.num_csx, j.spec.num_csx_min),
        lambda j, now: (len(j.systems), j.spec.num_csx),
    ),
    "SYSTEMS": _text(lambda j, now: ",".join(j.systems)),
    "USER": _text(lambda j, now: j.user),
    "LABELS": _text(lambda j, now: format_labels(j.spec.labels.items())),
    "QUEUE": _text(lambda j, now: j.spec.queue),
    "STEP": Column(
        # An evaluation reports the step of the weights it evaluates as its end.
        lambda j, now: f"{j.progress.step}/{j.progress.num_steps or j.spec.num_steps}",
        lambda j, now: j.progress.step,
    ),
    "RESTARTS": Column(lambda j, now: str(j.restarts), lambda j, now: j.restarts),
    "REASON": _text(reason_code),
    "PENDING": Column(pending_text, lambda j, now: j.queue_position or float("inf")),
    "START(EST)": Column(estimated_start, lambda j, now: j.estimated_start or float("inf")),
}


def row(job: Job, columns: Sequence[str], now: float) -> list[str]:
    return [COLUMNS[name].cell(job, now) for name in columns]


def columns_of(*, wide: bool = False, pending: bool = False) -> tuple[str, ...]:
    """`-o wide` adds REASON, QUEUE, STEP, RESTARTS, PENDING and START(EST); --show-pending
    adds the last two."""
    return WIDE_COLUMNS if wide else PENDING_COLUMNS if pending else JOB_COLUMNS


def jobs_table(
    jobs: Sequence[Job],
    *,
    now: float,
    wide: bool = False,
    pending: bool = False,
    headers: bool = True,
) -> Table:
    """The `csctl get jobs` table, in the order given."""
    columns = columns_of(wide=wide, pending=pending)
    return Table(columns, [row(job, columns, now) for job in jobs], headers=headers)


def job_detail_table(job: Job, *, now: float) -> str:
    """`csctl get job ID -o table`: the wide job row, then one row per replica."""
    text = "\n".join(jobs_table([job], now=now, wide=True).lines)
    if job.queue_position:
        text += f"\n\nQUEUE POSITION: {job.queue_position} in queue {job.spec.queue}"
    if job.hold is not None:
        kind = "suspended" if job.hold.suspended else f"{job.hold.kind} hold"
        text += f"\n\nHELD: {job.hold.reason.message} ({kind})"
    if job.estimated_start and job.phase is Phase.QUEUED:
        text += f"\n\nESTIMATED START: {estimated_start(job, now)} from now (an estimate)"
    if job.spec.depends_on:
        text += f"\n\nDEPENDS ON: {', '.join(str(d) for d in job.spec.depends_on)}"
    if job.dependents:
        text += f"\n\nDEPENDENTS: {', '.join(job.dependents)}"
    if job.attempt > 1 or job.spec.max_restarts:
        allowed = "cluster default" if job.spec.max_restarts is None else job.spec.max_restarts
        text += f"\n\nATTEMPT: {job.attempt} (restarts allowed: {allowed})"
    if job.attempts:
        rows = [attempt_row(a, now) for a in job.attempts]
        text += "\n\n" + format_table(ATTEMPT_COLUMNS, rows)
    if job.spec.params_yaml and (start := checkpoint_path_of(job.spec)):
        text += f"\n\nSTARTS FROM: {start}"  # asked for, or chosen at submit
    if strategy := execution_strategy_of(job.spec):
        text += f"\n\nEXECUTION: {EXECUTION_SAID[strategy]}"
    if job.spec.comment:
        text += f"\n\nCOMMENT: {job.spec.comment}"
    if job.spec.time_limit:
        text += f"\n\nTIME LIMIT: {job.spec.time_limit}"
    if job.reason:
        text += f"\n\nREASON: {job.reason}"
    if job.replicas:
        rows = [replica_row(replica) for replica in job.replicas]
        text += "\n\n" + format_table(REPLICA_COLUMNS, rows)
    return text


@dataclasses.dataclass(frozen=True)
class SortBy:
    """What --sort-by names: a column, or a path into the job's document."""

    column: str = ""
    path: tuple[str, ...] = ()

    def key(self, job: Job, now: float, document: dict[str, Any] | None) -> tuple[int, Any]:
        """The job's sort key: missing values last, numbers before text."""
        if self.column:
            value = COLUMNS[self.column].key(job, now)
        else:
            value = document
            for part in self.path:
                value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            return (2, 0)
        if isinstance(value, (int, float)):
            return (0, value)
        return (1, str(value))


def parse_sort_by(text: str, fields: frozenset[tuple[str, ...]]) -> SortBy:
    """The column or document field `text` names; ValueError saying what may be named. `fields`
    are the paths of a job document's scalar fields."""
    stripped = text.strip()
    if stripped.upper() in COLUMNS:
        return SortBy(column=stripped.upper())
    path_text = stripped.removeprefix("{").removesuffix("}").removeprefix(".")
    path = tuple(path_text.split(".")) if path_text else ()
    if path in fields or (len(path) == 3 and path[:2] == ("spec", "labels") and path[2]):
        return SortBy(path=path)
    shown = text if len(text) <= 64 else text[:64] + "..."
    raise ValueError(
        f"unknown field {shown!r}; sort by a column ({', '.join(COLUMNS)}) or a field of "
        "`-o json` such as .spec.priority, .progress.step or .spec.labels.KEY"
    )


def document_fields(document: dict[str, Any]) -> frozenset[tuple[str, ...]]:
    """The paths of the scalar fields of a job document (lists and mappings left out)."""
    found: set[tuple[str, ...]] = set()

    def walk(value: Any, path: tuple[str, ...]) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(inner, (*path, key))
        elif not isinstance(value, list):
            found.add(path)

    walk(document, ())
    return frozenset(found)


@functools.cache
def sample_job() -> Job:
    """A job with every field present, whose document shows which fields may be sorted by."""
    spec = JobSpec(params_yaml="", num_csx=1, num_steps=1)
    return Job(id="", user="", spec=spec, phase=Phase.QUEUED, created_at=0.0, updated_at=0.0)
