"""Rows to domain objects and back: jobs (one function for summaries and full views), plans,
replicas, events."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.engine import RowMapping

from appliance.domain.job import EventKind, Job, JobEvent, Lease, Progress, Replica, ReplicaPhase
from appliance.domain.phases import Phase
from appliance.domain.plan import ReplicaGroup, ReplicaPlan, Role
from appliance.domain.spec import JobSpec, Mode, Priority
from appliance.store.tables import JobEventRow, JobRow, ReplicaRow

# What a list shows of a job: every column but the params YAML.
SUMMARY = (
    JobRow.id, JobRow.user, JobRow.phase, JobRow.priority, JobRow.mode, JobRow.num_csx,
    JobRow.num_steps, JobRow.model_dir, JobRow.labels, JobRow.reason, JobRow.pending_reason,
    JobRow.systems, JobRow.created_at, JobRow.updated_at, JobRow.started_at, JobRow.finished_at,
    JobRow.progress, JobRow.lease_seconds, JobRow.lease_expires_at, JobRow.lease_holder,
    JobRow.groups, JobRow.attempt, JobRow.max_restarts, JobRow.restarts,
    JobRow.preemptible, JobRow.retries, JobRow.queue,
)  # fmt: skip


def job_from_row(
    r: Any, params_yaml: str = "", replicas: tuple[Replica, ...] = (), position: int = 0
) -> Job:
    """A job from a JobRow or a row of SUMMARY columns: a summary (what a list shows), or a full
    view when given the params YAML, the replicas and the queue position."""
    spec = JobSpec(
        params_yaml=params_yaml, num_csx=r.num_csx, num_steps=r.num_steps, mode=Mode(r.mode),
        labels=dict(r.labels or {}), priority=Priority(r.priority), model_dir=r.model_dir,
        max_restarts=r.max_restarts, preemptible=r.preemptible, queue=r.queue,
    )  # fmt: skip
    return Job(
        id=r.id, user=r.user, spec=spec, phase=Phase(r.phase), created_at=r.created_at,
        updated_at=r.updated_at, reason=r.reason, pending_reason=r.pending_reason,
        systems=tuple(filter(None, r.systems.split(","))),
        progress=Progress(**r.progress) if r.progress else _NO_PROGRESS,
        started_at=r.started_at, finished_at=r.finished_at,
        lease=lease_of(r.lease_seconds, r.lease_expires_at, r.lease_holder),
        groups=tuple(r.groups or ()), replicas=replicas, queue_position=position,
        attempt=r.attempt, restarts=r.restarts, retries=r.retries,
    )  # fmt: skip


_NO_PROGRESS = Progress()


def lease_of(seconds: float, expires_at: float, holder: str) -> Lease | None:
    return Lease(seconds, expires_at, holder) if seconds > 0 else None


def plan_to_json(plan: ReplicaPlan) -> dict[str, Any]:
    return {
        "model_bytes": plan.model_bytes,
        "groups": [[g.role.value, g.count, g.demand] for g in plan.groups],
    }


def plan_from_json(data: Mapping[str, Any] | None) -> ReplicaPlan:
    assert data is not None
    groups = tuple(ReplicaGroup(Role(r), int(c), int(d)) for r, c, d in data["groups"])
    return ReplicaPlan(groups=groups, model_bytes=int(data["model_bytes"]))


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
    )


_REPLICA_COLUMNS = tuple(ReplicaRow.__table__.columns.keys())


_ROLE_ORDER = {Role.CHIEF: 0, Role.CS2: 1, Role.SWARMX: 2, Role.MEMORYX: 3}


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
    )
