"""Rows to domain objects and back: jobs (one function for summaries and full views), plans,
replicas, events."""

from __future__ import annotations

import dataclasses
import functools
import json
import operator
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import JSON, Text, type_coerce
from sqlalchemy.engine import RowMapping

from appliance.domain.arrays import TaskOf
from appliance.domain.holds import hold_of
from appliance.domain.job import EventKind, Job, JobEvent, Lease, Progress, Replica, ReplicaPhase
from appliance.domain.phases import Phase
from appliance.domain.plan import ReplicaGroup, ReplicaPlan, Role
from appliance.domain.spec import JobSpec, Priority
from appliance.domain.spec_document import stored_values
from appliance.store.tables import JobEventRow, JobRow, ReplicaRow

# What a list shows of a job: every column but the params YAML. The spec is the `spec` document
# and the spec's columns (domain/spec_document.py says which): a new spec field changes neither.
SUMMARY = (
    JobRow.id, JobRow.user, JobRow.phase, JobRow.priority, JobRow.queue, JobRow.labels,
    JobRow.spec, JobRow.reason, JobRow.pending_reason, JobRow.systems, JobRow.created_at,
    JobRow.updated_at, JobRow.started_at, JobRow.finished_at, JobRow.progress,
    JobRow.lease_seconds, JobRow.lease_expires_at, JobRow.lease_holder, JobRow.groups,
    JobRow.attempt, JobRow.restarts, JobRow.retries, JobRow.reason_code,
    JobRow.pending_reason_code, JobRow.array_id, JobRow.array_index, JobRow.array_cap,
    JobRow.array_overrides, JobRow.hold, JobRow.held_by, JobRow.suspended,
)  # fmt: skip

# SUMMARY as the driver gives it, for reads of many summaries: the JSON columns undecoded
# (text on SQLite; psycopg decodes them itself), so that job_from_values decodes labels, groups
# and spec documents once per distinct text rather than SQLAlchemy once per row (a third of a
# 100,000-job listing's read went to that), and no column is converted on the way.
SUMMARY_AS_READ = tuple(
    type_coerce(c, Text).label(c.key) if isinstance(c.type, JSON) else c for c in SUMMARY
)
_SUMMARY_VALUES = operator.attrgetter(*(c.key for c in SUMMARY))
_PHASES = {p.value: p for p in Phase}
_PRIORITIES = {int(p): p for p in Priority}


def job_from_row(
    r: Any, params_yaml: str = "", replicas: tuple[Replica, ...] = (), position: int = 0
) -> Job:
    """A job from a JobRow or a row of SUMMARY columns: a summary (what a list shows), or a full
    view when given the params YAML, the replicas and the queue position."""
    return job_from_values(_SUMMARY_VALUES(r), params_yaml, replicas, position)


def job_from_values(
    v: Sequence[Any], params_yaml: str = "", replicas: tuple[Replica, ...] = (), position: int = 0
) -> Job:
    """job_from_row of the SUMMARY columns' values in their order (JSON decoded or not)."""
    (job_id, user, phase, priority, queue, labels, spec, reason, pending_reason, systems,
     created_at, updated_at, started_at, finished_at, progress, lease_seconds, lease_expires_at,
     lease_holder, groups, attempt, restarts, retries, reason_code, pending_reason_code,
     array_id, array_index, array_cap, array_overrides, hold, held_by, suspended,
     ) = v  # fmt: skip
    job_spec = JobSpec(
        params_yaml=params_yaml, labels=dict(_shared_json(labels) or {}),
        priority=_PRIORITIES[priority], queue=queue, **spec_of(spec),
    )  # fmt: skip
    if isinstance(progress, str):
        progress = json.loads(progress) if progress != "{}" else None
    return Job(
        id=job_id, user=user, spec=job_spec, phase=_PHASES[phase], created_at=created_at,
        updated_at=updated_at, reason=reason, pending_reason=pending_reason,
        systems=tuple(filter(None, systems.split(","))),
        progress=Progress(**progress) if progress else _NO_PROGRESS,
        started_at=started_at, finished_at=finished_at,
        # An ended job holds no lease: its client's heartbeats keep nothing running any more.
        lease=None if _PHASES[phase].terminal else lease_of(
            lease_seconds, lease_expires_at, lease_holder
        ),
        groups=tuple(_shared_json(groups) or ()), replicas=replicas, queue_position=position,
        attempt=attempt, restarts=restarts, retries=retries,
        reason_code=reason_code, pending_reason_code=pending_reason_code,
        array=_task_of(array_id, array_index, array_cap, array_overrides),
        hold=hold_of(hold, held_by, suspended) if hold else None,
    )  # fmt: skip


def _task_of(array_id: str, index: int, cap: int, overrides: Any) -> TaskOf | None:
    """A task's place in its array (None for a job of no array: no JSON decoded)."""
    if not array_id:
        return None
    return TaskOf(array_id, index, cap, dict(_shared_json(overrides) or {}))


def spec_of(document: str | Mapping[str, Any]) -> Mapping[str, Any]:
    """The decoded fields of a `spec` column, as text or decoded (shared: do not change it)."""
    if isinstance(document, str):
        return _spec_of_text(document)
    return stored_values(document)


@functools.lru_cache(maxsize=4096)
def _spec_of_text(text: str) -> Mapping[str, Any]:
    return stored_values(json.loads(text))


def _shared_json(value: Any) -> Any:
    """A JSON column's value decoded (the driver may have done it): decoded once per distinct
    text, so the caller must copy what it keeps (a job's labels and groups repeat a lot)."""
    return _decode_shared(value) if isinstance(value, str) else value


@functools.lru_cache(maxsize=4096)
def _decode_shared(text: str) -> Any:
    return json.loads(text)


_NO_PROGRESS = Progress()


def lease_of(seconds: float, expires_at: float, holder: str) -> Lease | None:
    return Lease(seconds, expires_at, holder) if seconds > 0 else None


def plan_to_json(plan: ReplicaPlan) -> dict[str, Any]:
    """The plan's column; an elastic job's larger sizes under `larger` (each its groups and
    wafer bytes: the model's bytes are the same)."""
    data: dict[str, Any] = {
        "model_bytes": plan.model_bytes,
        "wafer_bytes": plan.wafer_bytes,
        "groups": _groups_to_json(plan),
    }
    if plan.larger:
        data["larger"] = [
            {"groups": _groups_to_json(p), "wafer_bytes": p.wafer_bytes} for p in plan.larger
        ]
    return data


def _groups_to_json(plan: ReplicaPlan) -> list[list[Any]]:
    return [[g.role.value, g.count, g.demand] for g in plan.groups]


def plan_from_json(data: str | Mapping[str, Any] | None) -> ReplicaPlan:
    """A plan from its column, decoded or as text (a read of many plans selects the text, see
    PLAN_AS_READ). Plans are immutable, and a queue of 100,000 jobs holds a handful of distinct
    ones: each distinct plan is one shared object, decoded once."""
    assert data is not None
    if isinstance(data, str):
        return _plan_of_text(data)
    model_bytes = int(data["model_bytes"])
    # A plan stored before the wafer had a size (#34) needs none of it.
    plan = _plan_of(_groups_of(data["groups"]), model_bytes, int(data.get("wafer_bytes", 0)))
    larger = data.get("larger")
    if not larger:
        return plan
    sizes = tuple(
        _plan_of(_groups_of(p["groups"]), model_bytes, int(p.get("wafer_bytes", 0)))
        for p in larger
    )
    return dataclasses.replace(plan, larger=sizes)


def _groups_of(groups: Any) -> tuple[tuple[str, int, int], ...]:
    return tuple((str(r), int(c), int(d)) for r, c, d in groups)


PLAN_AS_READ = type_coerce(JobRow.plan, Text).label("plan")


@functools.lru_cache(maxsize=1024)
def _plan_of_text(text: str) -> ReplicaPlan:
    return plan_from_json(json.loads(text))


@functools.lru_cache(maxsize=1024)
def _plan_of(
    groups: tuple[tuple[str, int, int], ...], model_bytes: int, wafer_bytes: int
) -> ReplicaPlan:
    return ReplicaPlan(
        groups=tuple(ReplicaGroup(Role(r), c, d) for r, c, d in groups),
        model_bytes=model_bytes,
        wafer_bytes=wafer_bytes,
    )


def replica_from_row(r: ReplicaRow | RowMapping) -> Replica:
    """A replica from its ORM row, or from a row of the replicas table read with Core."""
    m = r if isinstance(r, RowMapping) else {c: getattr(r, c) for c in _REPLICA_COLUMNS}
    return Replica(
        job_id=m["job_id"],
        name=m["name"],
        role=Role(m["role"]),
        index=m["index"],
        node=m["node"],
        phase=ReplicaPhase(m["phase"]),
        address=m["address"],
        pid=m["pid"],
        exit_code=m["exit_code"],
        message=m["message"],
        log_tail=m["log_tail"],
        data_plane=m["data_plane"],
    )


_REPLICA_COLUMNS = tuple(ReplicaRow.__table__.columns.keys())


_ROLE_ORDER = {Role.CHIEF: 0, Role.CS2: 1, Role.SWARMX: 2, Role.MEMORYX: 3, Role.WORKER: 4}


def sorted_replicas(replicas: tuple[Replica, ...]) -> tuple[Replica, ...]:
    return tuple(sorted(replicas, key=lambda r: (_ROLE_ORDER[r.role], r.index)))


def event_from_row(r: JobEventRow) -> JobEvent:
    return JobEvent(
        job_id=r.job_id,
        kind=EventKind.PHASE,
        time=r.time,
        seq=r.seq,
        from_phase=Phase(r.from_phase) if r.from_phase else None,
        to_phase=Phase(r.to_phase),
        reason=r.reason,
        reason_code=r.reason_code,
    )
