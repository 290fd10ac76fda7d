"""JobStore: every read and write of jobs, and the only writer of job phase.

`set_phase` (and `set_phases`, its batch form) checks the transition table and writes with
compare-and-set on the current phase, recording an event in the same transaction. Leaving the
resource-holding phases releases the job's placements in that same transaction, so the pool
can never leak. The writes themselves are in store/phase_writes.py. The pool, the queue,
listing, reads, controls (priority, labels, leases), attempts, requeue requests and replicas
are JobStore's other parts (store/pool.py, backlog.py, listing.py, job_reads.py,
job_controls.py, attempts.py, requeues.py, replicas.py); rows become domain objects in
store/rows.py, and a spec is stored as domain/spec_document.py writes it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from sqlalchemy import insert, select, update

from appliance.domain.arrays import TaskOf
from appliance.domain.backlog import Placement
from appliance.domain.errors import InvalidSpec, NotFound
from appliance.domain.holds import Hold
from appliance.domain.job import Job, ReplicaPhase
from appliance.domain.phase_moves import PhaseChange, PhaseMove
from appliance.domain.phases import Phase
from appliance.domain.plan import ReplicaPlan, Role
from appliance.domain.queues import DEFAULT_QUEUE, Source
from appliance.domain.reasons import Reason, ReasonCode, as_reason, said
from appliance.domain.spec import JobSpec
from appliance.domain.spec_document import stored_document
from appliance.store.arrays import ArrayStore
from appliance.store.audit import AuditStore
from appliance.store.base import in_chunks
from appliance.store.holds import JobHoldStore
from appliance.store.job_controls import JobControlStore
from appliance.store.leadership import LeadershipStore
from appliance.store.listing import ListingStore
from appliance.store.phase_writes import write_phases
from appliance.store.pool import PoolStore
from appliance.store.queue_defs import QueueDefStore
from appliance.store.replica_batches import ReplicaBatchStore
from appliance.store.replicas import ReplicaStore
from appliance.store.requeues import RequeueStore
from appliance.store.reservations import ReservationStore
from appliance.store.rows import (
    lease_of,
    plan_from_json,
    plan_to_json,
)
from appliance.store.tables import (
    JobDependencyRow,
    JobEventRow,
    JobLabelRow,
    JobRow,
    PlacementRow,
    QueueRow,
    ReplicaRow,
)
from appliance.store.time_limits import TimeLimitStore
from appliance.store.usage import UsageStore


@dataclasses.dataclass(frozen=True)
class NewJob:
    job_id: str
    user: str
    spec: JobSpec
    plan: ReplicaPlan
    lease_seconds: float = 0.0
    lease_holder: str = ""
    groups: tuple[str, ...] = ()
    # Recorded as events after the submitted one (params keys accepted but not used).
    warnings: tuple[Reason, ...] = ()
    # Its place in its array, when it is an array's task (domain/arrays.py).
    array: TaskOf | None = None
    # Submitted held (spec.hold): whose hold it is (domain/holds.py).
    hold: Hold | None = None


# Why a new job waits, until a scheduler pass says why; and what its first event says.
_WAITING = said(ReasonCode.SCHEDULER)


class JobStore(
    JobControlStore,
    JobHoldStore,
    PoolStore,
    ListingStore,
    RequeueStore,
    TimeLimitStore,
    ReplicaStore,
    ReplicaBatchStore,
    QueueDefStore,
    UsageStore,
    LeadershipStore,
    AuditStore,
    ArrayStore,
    ReservationStore,
):
    """The store of jobs: this part creates jobs and writes their phases (the one writer) and
    their placements; reading jobs is store/job_reads.py's, priority, labels and leases
    store/job_controls.py's."""

    def create_jobs(self, new: Sequence[NewJob], now: float) -> list[Job]:
        """Persist several new QUEUED jobs in one transaction (group commit of submits)."""
        jobs = [
            {
                "id": n.job_id, "user": n.user, "phase": Phase.QUEUED.value,
                "priority": int(n.spec.priority), "spec": stored_document(n.spec),
                "params_yaml": n.spec.params_yaml, "labels": dict(n.spec.labels),
                "plan": plan_to_json(n.plan), "reason": "",
                "pending_reason": _WAITING.message, "systems": "",
                "created_at": now, "updated_at": now, "started_at": 0.0, "finished_at": 0.0,
                "progress": {}, "lease_seconds": n.lease_seconds,
                "lease_expires_at": now + n.lease_seconds if n.lease_seconds else 0.0,
                "lease_holder": n.lease_holder, "groups": list(n.groups), "queue": n.spec.queue,
                "account_group": n.groups[0] if n.groups else "",
                "queued_at": now, "pending_reason_code": _WAITING.code_text,
            }
            for n in new
        ]  # fmt: skip
        if any(n.array is not None for n in new):  # else the columns' defaults: no array
            for job, n in zip(jobs, new, strict=True):
                job.update(_array_columns(n.array))
        if any(n.hold is not None for n in new):  # else the columns' defaults: not held
            for job, n in zip(jobs, new, strict=True):
                job.update(
                    hold=n.hold.kind.value if n.hold else "", held_by=n.hold.by if n.hold else ""
                )
        if any(n.spec.time_limit for n in new):  # else the column's default: no limit
            for job, n in zip(jobs, new, strict=True):
                job["time_limit"] = n.spec.time_limit_seconds or 0
        labels = [
            {"job_id": n.job_id, "key": k, "value": v}
            for n in new
            for k, v in n.spec.labels.items()
        ]
        submitted = ReasonCode.SUBMITTED
        events = [
            {"job_id": n.job_id, "time": now, "from_phase": None,
             "to_phase": Phase.QUEUED.value, "reason": said(submitted, user=n.user).message,
             "reason_code": submitted.value}
            for n in new
        ]  # fmt: skip
        events += [
            {"job_id": n.job_id, "time": now, "from_phase": None,
             "to_phase": Phase.QUEUED.value, "reason": w.message, "reason_code": w.code_text}
            for n in new
            for w in n.warnings
        ]  # fmt: skip
        dependencies = [
            {"job_id": n.job_id, "depends_on": d.job_id, "condition": d.condition.value}
            for n in new
            for d in n.spec.depends_on
        ]
        named = sorted({n.spec.queue for n in new} - {DEFAULT_QUEUE})
        with self.engine.begin() as conn:
            if named:  # FOR SHARE: a queue cannot be deleted under the jobs being added to it
                found = set(
                    conn.execute(
                        select(QueueRow.name)
                        .where(QueueRow.name.in_(named), QueueRow.source != Source.KEPT)
                        .with_for_update(read=True)
                    ).scalars()
                )
                missing = [name for name in named if name not in found]
                if missing:
                    raise InvalidSpec(
                        f"queue {missing[0]} does not exist (or takes no new jobs)", field="queue"
                    )
            conn.execute(insert(JobRow), jobs)
            if labels:
                conn.execute(insert(JobLabelRow), labels)
            if dependencies:
                conn.execute(insert(JobDependencyRow), dependencies)
                # Their full views now list one more dependent.
                depended = sorted({d["depends_on"] for d in dependencies})
                conn.execute(
                    update(JobRow)
                    .where(JobRow.id.in_(depended))
                    .values(version=JobRow.version + 1)
                )
            conn.execute(insert(JobEventRow), events)
        return [
            Job(id=n.job_id, user=n.user, spec=n.spec, phase=Phase.QUEUED, created_at=now,
                updated_at=now, pending_reason=_WAITING.message,
                pending_reason_code=_WAITING.code_text,
                lease=lease_of(n.lease_seconds, now + n.lease_seconds, n.lease_holder),
                groups=n.groups, array=n.array, hold=n.hold)
            for n in new
        ]  # fmt: skip

    # ---- phase: the one writer ----------------------------------------------------------------

    def set_phase(
        self,
        job_id: str,
        target: Phase,
        reason: Reason | str,
        now: float,
        expected: Phase | None = None,
    ) -> PhaseChange:
        """Move a job to `target` if the table allows it; record the event; release resources.
        (`reason` a plain string: a message without a code, as tests of the store give.)

        `expected` pins the phase the caller decided on (compare-and-set); without it the
        current phase is read in the same transaction. Raises NotFound for an unknown job.
        """
        with self.engine.begin() as conn:
            move = PhaseMove(job_id, target, as_reason(reason), expected)
            return _found(write_phases(conn, [move], now, fence=self.fence))

    def set_phases(self, moves: Sequence[PhaseMove], now: float) -> list[PhaseChange | NotFound]:
        """set_phase for several jobs in one transaction (group commit of cancels).

        Each move is checked and compare-and-set on its own, and gets its own outcome, in
        order: an unknown job is a NotFound in its place, not a failure of the others; a job
        named twice sees the effect of its earlier move.
        """
        with self.engine.begin() as conn:  # Core only: no ORM session to set up
            return write_phases(conn, moves, now, fence=self.fence)

    def schedule(self, job_id: str, placements: Sequence[Placement], now: float) -> PhaseChange:
        """QUEUED -> SCHEDULED with the job's placements and replica rows, all or nothing."""
        change = self.schedule_many([(job_id, placements)], now)[0]
        if isinstance(change, NotFound):
            raise change
        return change

    def schedule_many(
        self, decisions: Sequence[tuple[str, Sequence[Placement]]], now: float
    ) -> list[PhaseChange | NotFound]:
        """`schedule` for each of the decisions of one scheduler pass, in one transaction (one
        commit for the pass); each applies or not on its own, with its outcome in its place."""
        with self._sessions.begin() as s:
            conn = s.connection()
            moves = []
            for job_id, placements in decisions:
                systems = systems_of(placements)
                reason = said(ReasonCode.ADMITTED, systems=", ".join(systems))
                columns = {"systems": ",".join(systems)}
                moves.append(PhaseMove(job_id, Phase.SCHEDULED, reason, Phase.QUEUED, columns))
            outcomes = write_phases(conn, moves, now, fence=self.fence)
            applied = [
                decision
                for decision, change in zip(decisions, outcomes, strict=True)
                if isinstance(change, PhaseChange) and change.applied
            ]
            if not applied:
                return outcomes
            plans: dict[str, ReplicaPlan] = {}
            for chunk in in_chunks([job_id for job_id, _ in applied]):
                stmt = select(JobRow.id, JobRow.plan).where(JobRow.id.in_(chunk))
                plans.update((i, plan_from_json(plan)) for i, plan in s.execute(stmt))
            placement_rows: list[dict[str, object]] = []
            replica_rows: list[dict[str, object]] = []
            for job_id, placements in applied:
                placement_rows += (
                    {"job_id": job_id, "replica": p.replica, "node": p.node, "amount": p.amount}
                    for p in placements
                )
                node_of = {p.replica: p.node for p in placements}
                plan = plans[job_id].of_size(len(systems_of(placements)))  # elastic: its size
                replica_rows += (
                    _pending_replica(job_id, name, role, index, node_of.get(name, "mgmt"))
                    for name, role, index in plan.replica_names()
                )
            conn.execute(insert(PlacementRow), placement_rows)
            conn.execute(insert(ReplicaRow), replica_rows)
        return outcomes

    def set_condition(self, job_id: str, phase: Phase, reason: Reason) -> bool:
        """Say why a job in `phase` is not moving on: written to its pending_reason, the field
        every door shows as the reason a job waits (no phase change)."""
        text, code = reason.message, reason.code_text
        with self._sessions.begin() as s:
            result = s.execute(
                update(JobRow)
                .where(
                    JobRow.id == job_id,
                    JobRow.phase == phase.value,
                    (JobRow.pending_reason != text) | (JobRow.pending_reason_code != code),
                )
                .values(pending_reason=text, pending_reason_code=code, version=JobRow.version + 1)
            )
        return bool(result.rowcount)  # type: ignore[attr-defined]


_NO_ARRAY: dict[str, object] = {
    "array_id": "", "array_index": 0, "array_cap": 0, "array_overrides": {},
}  # fmt: skip


def _array_columns(task: TaskOf | None) -> dict[str, object]:
    if task is None:
        return _NO_ARRAY
    return {
        "array_id": task.array_id, "array_index": task.index, "array_cap": task.cap,
        "array_overrides": dict(task.overrides),
    }  # fmt: skip


def systems_of(placements: Sequence[Placement]) -> list[str]:
    """The CS-2 systems of a job's placements (an elastic job's size is their number)."""
    return [p.node for p in placements if p.role is Role.CS2]


def _pending_replica(
    job_id: str, name: str, role: Role, index: int, node: str
) -> dict[str, object]:
    """A replica's row as scheduling writes it: placed, not started."""
    return {
        "job_id": job_id, "name": name, "role": role.value, "index": index, "node": node,
        "phase": ReplicaPhase.PENDING.value, "address": "", "pid": 0, "exit_code": None,
        "message": "", "log_tail": "", "data_plane": "",
    }  # fmt: skip


def _found(changes: Sequence[PhaseChange | NotFound]) -> PhaseChange:
    """The one change of a one-move batch; raises its NotFound."""
    (change,) = changes
    if isinstance(change, NotFound):
        raise change
    return change
