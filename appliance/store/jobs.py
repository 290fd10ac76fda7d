"""JobStore: every read and write of jobs, and the only writer of job phase.

`set_phase` (and `set_phases`, its batch form) checks the transition table and writes with
compare-and-set on the current phase, recording an event in the same transaction. Leaving the
resource-holding phases releases the job's placements in that same transaction, so the pool
can never leak. The writes themselves are in store/phase_writes.py. The pool, the queue,
listing, attempts, requeue requests and replicas are JobStore's other parts (store/pool.py,
queue.py, listing.py, attempts.py, requeues.py, replicas.py); rows become domain objects in
store/rows.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from sqlalchemy import bindparam, delete, func, insert, select, update

from appliance.domain.backlog import Placement
from appliance.domain.errors import Conflict, InvalidSpec, NotFound, job_not_found
from appliance.domain.job import Job, JobEvent, Replica, ReplicaPhase
from appliance.domain.phase_moves import PhaseChange, PhaseMove
from appliance.domain.phases import Phase
from appliance.domain.plan import ReplicaPlan, Role
from appliance.domain.queues import DEFAULT_QUEUE, Source
from appliance.domain.spec import JobSpec, Priority, validate_labels
from appliance.store.attempts import AttemptStore
from appliance.store.backlog import BacklogStore
from appliance.store.base import in_chunks
from appliance.store.dependencies import DependencyStore
from appliance.store.leadership import LeadershipStore
from appliance.store.listing import ListingStore
from appliance.store.phase_writes import write_phases
from appliance.store.pool import PoolStore
from appliance.store.queue_defs import QueueDefStore
from appliance.store.replica_batches import ReplicaBatchStore
from appliance.store.replicas import ReplicaStore
from appliance.store.requeues import RequeueStore
from appliance.store.rows import (
    SUMMARY,
    event_from_row,
    job_from_row,
    lease_of,
    plan_from_json,
    plan_to_json,
    replica_from_row,
    sorted_replicas,
)
from appliance.store.tables import (
    ACTIVE_PHASES_SQL,
    JobDependencyRow,
    JobEventRow,
    JobLabelRow,
    JobRow,
    PlacementRow,
    QueueRow,
    ReplicaRow,
)
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


_FULL_VIEWS_OF = select(*SUMMARY, JobRow.params_yaml).where(
    JobRow.id.in_(bindparam("ids", expanding=True))
)


_REPLICAS_OF = select(*ReplicaRow.__table__.columns).where(
    ReplicaRow.job_id.in_(bindparam("ids", expanding=True))
)


class JobStore(
    PoolStore,
    BacklogStore,
    ListingStore,
    AttemptStore,
    RequeueStore,
    ReplicaStore,
    ReplicaBatchStore,
    QueueDefStore,
    DependencyStore,
    UsageStore,
    LeadershipStore,
):
    """The store of jobs: this part holds jobs, phases (the one writer), replicas, priority,
    labels, leases and events."""

    def count_by_phase(self) -> dict[Phase, int]:
        """How many jobs are in each phase (an index scan of ix_jobs_phase)."""
        with self._sessions() as s:
            rows = s.execute(select(JobRow.phase, func.count()).group_by(JobRow.phase))
            return {Phase(phase): int(count) for phase, count in rows}

    def create_jobs(self, new: Sequence[NewJob], now: float) -> list[Job]:
        """Persist several new QUEUED jobs in one transaction (group commit of submits)."""
        jobs = [
            {
                "id": n.job_id, "user": n.user, "phase": Phase.QUEUED.value,
                "priority": int(n.spec.priority), "mode": n.spec.mode.value,
                "num_csx": n.spec.num_csx, "num_steps": n.spec.num_steps,
                "model_dir": n.spec.model_dir, "params_yaml": n.spec.params_yaml,
                "labels": dict(n.spec.labels), "plan": plan_to_json(n.plan), "reason": "",
                "pending_reason": "waiting for the scheduler", "systems": "",
                "created_at": now, "updated_at": now, "started_at": 0.0, "finished_at": 0.0,
                "progress": {}, "lease_seconds": n.lease_seconds,
                "lease_expires_at": now + n.lease_seconds if n.lease_seconds else 0.0,
                "lease_holder": n.lease_holder, "groups": list(n.groups),
                "max_restarts": n.spec.max_restarts, "preemptible": n.spec.preemptible,
                "queue": n.spec.queue, "account_group": n.groups[0] if n.groups else "",
                "queued_at": now,
            }
            for n in new
        ]  # fmt: skip
        labels = [
            {"job_id": n.job_id, "key": k, "value": v}
            for n in new
            for k, v in n.spec.labels.items()
        ]
        events = [
            {"job_id": n.job_id, "time": now, "from_phase": None,
             "to_phase": Phase.QUEUED.value, "reason": f"submitted by {n.user}"}
            for n in new
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
                updated_at=now, pending_reason="waiting for the scheduler",
                lease=lease_of(n.lease_seconds, now + n.lease_seconds, n.lease_holder),
                groups=n.groups)
            for n in new
        ]  # fmt: skip

    def get_job(self, job_id: str, *, with_replicas: bool = True) -> Job:
        return self.get_job_version(job_id, with_replicas=with_replicas)[0]

    def get_job_version(self, job_id: str, *, with_replicas: bool = True) -> tuple[Job, int]:
        """The job and the version its row had. The row is read before the replicas, and a
        replica change bumps the version, so what is returned is at least that version."""
        with self._sessions() as s:
            row = s.get(JobRow, job_id)
            if row is None:
                raise job_not_found(job_id)
            replicas: tuple[Replica, ...] = ()
            if with_replicas:
                replicas = tuple(
                    replica_from_row(r)
                    for r in s.scalars(select(ReplicaRow).where(ReplicaRow.job_id == job_id))
                )
            position = 0
            if row.phase == Phase.QUEUED.value:
                position = self._queue_position(s, row.priority, row.created_at, row.id, row.queue)
            job = job_from_row(row, row.params_yaml, sorted_replicas(replicas), position)
            job = self._with_dependencies(s, job)
            if row.restarts:  # the attempts it ended to run again, and how the last one went
                job = dataclasses.replace(job, attempts=tuple(self._attempts(s, job_id)))
            return job, row.version

    def get_jobs(self, job_ids: Sequence[str]) -> list[Job]:
        """Full views of the given jobs, as get_job gives them, in no particular order (unknown
        ids are left out): two queries a chunk instead of two a job."""
        found: list[Job] = []
        with self._sessions() as s:
            conn = s.connection()
            for chunk in in_chunks(list(job_ids)):
                replicas: dict[str, list[Replica]] = {}
                for m in conn.execute(_REPLICAS_OF, {"ids": chunk}).mappings():
                    replicas.setdefault(m["job_id"], []).append(replica_from_row(m))
                for r in conn.execute(_FULL_VIEWS_OF, {"ids": chunk}):
                    position = 0
                    if r.phase == Phase.QUEUED.value:
                        position = self._queue_position(s, r.priority, r.created_at, r.id, r.queue)
                    own = sorted_replicas(tuple(replicas.get(r.id, ())))
                    found.append(job_from_row(r, r.params_yaml, own, position))
        return found

    def job_version(self, job_id: str) -> tuple[int, bool]:
        """(version, whether it is queued) of a job: what a cached full view needs to be checked
        against (a queued job's position moves with other jobs, without this job's version)."""
        with self._sessions() as s:
            found = s.execute(
                select(JobRow.version, JobRow.phase).where(JobRow.id == job_id)
            ).first()
            if found is None:
                raise job_not_found(job_id)
            version, phase = found
            return int(version), phase == Phase.QUEUED.value

    def job_ids_in(self, phases: Iterable[Phase]) -> list[str]:
        """The ids of the jobs in `phases` (an index scan of ix_jobs_phase)."""
        stmt = select(JobRow.id).where(JobRow.phase.in_([p.value for p in phases]))
        with self._sessions() as s:
            return list(s.scalars(stmt))

    def jobs_in(self, phases: Iterable[Phase]) -> list[Job]:
        with self._sessions() as s:
            rows = s.scalars(select(JobRow).where(JobRow.phase.in_([p.value for p in phases])))
            return [job_from_row(r, r.params_yaml) for r in rows]

    # ---- phase: the one writer ----------------------------------------------------------------

    def set_phase(
        self, job_id: str, target: Phase, reason: str, now: float, expected: Phase | None = None
    ) -> PhaseChange:
        """Move a job to `target` if the table allows it; record the event; release resources.

        `expected` pins the phase the caller decided on (compare-and-set); without it the
        current phase is read in the same transaction. Raises NotFound for an unknown job.
        """
        with self.engine.begin() as conn:
            move = PhaseMove(job_id, target, reason, expected)
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
                systems = [p.node for p in placements if p.role is Role.CS2]
                reason = "reserved " + ", ".join(systems) if systems else "reserved"
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
                replica_rows += (
                    _pending_replica(job_id, name, role, index, node_of.get(name, "mgmt"))
                    for name, role, index in plans[job_id].replica_names()
                )
            conn.execute(insert(PlacementRow), placement_rows)
            conn.execute(insert(ReplicaRow), replica_rows)
        return outcomes

    def set_condition(self, job_id: str, phase: Phase, text: str) -> bool:
        """Say why a job in `phase` is not moving on: written to its pending_reason, the field
        every door shows as the reason a job waits (no phase change)."""
        with self._sessions.begin() as s:
            result = s.execute(
                update(JobRow)
                .where(
                    JobRow.id == job_id,
                    JobRow.phase == phase.value,
                    JobRow.pending_reason != text,
                )
                .values(pending_reason=text, version=JobRow.version + 1)
            )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    def phase_of(self, job_id: str) -> Phase | None:
        with self._sessions() as s:
            value = s.scalar(select(JobRow.phase).where(JobRow.id == job_id))
            return Phase(value) if value is not None else None

    def phases_of(self, job_ids: Iterable[str]) -> dict[str, Phase]:
        ids = list(job_ids)
        if not ids:
            return {}
        with self._sessions() as s:
            rows = s.execute(select(JobRow.id, JobRow.phase).where(JobRow.id.in_(ids)))
            return {job_id: Phase(phase) for job_id, phase in rows}

    # ---- priority, labels, leases, events -----------------------------------------------------

    def set_priority(self, job_id: str, priority: Priority, now: float) -> Job:
        """Re-prioritise a job that has not finished (terminal jobs are frozen)."""
        with self._sessions.begin() as s:
            result = s.execute(
                update(JobRow)
                .where(JobRow.id == job_id, ACTIVE_PHASES_SQL)
                .values(priority=int(priority), updated_at=now, version=JobRow.version + 1)
            )
            if result.rowcount != 1:  # type: ignore[attr-defined]
                phase = s.scalar(select(JobRow.phase).where(JobRow.id == job_id))
                if phase is None:
                    raise job_not_found(job_id)
                raise Conflict(
                    f"job {job_id} is {phase}; the priority of a finished job is frozen"
                )
        return self.get_job(job_id)

    def update_labels(
        self, job_id: str, set_labels: Mapping[str, str], remove: Iterable[str], now: float
    ) -> Job:
        """Add or change `set_labels`, drop `remove`; the JSON copy and the rows move together."""
        with self._sessions.begin() as s:
            row = s.get(JobRow, job_id, with_for_update=True)
            if row is None:
                raise job_not_found(job_id)
            labels = {k: v for k, v in (row.labels or {}).items() if k not in set(remove)}
            labels.update(set_labels)
            validate_labels(labels)
            s.execute(delete(JobLabelRow).where(JobLabelRow.job_id == job_id))
            if labels:
                s.execute(
                    insert(JobLabelRow),
                    [{"job_id": job_id, "key": k, "value": v} for k, v in labels.items()],
                )
            row.labels = labels
            row.updated_at = now
            row.version = row.version + 1
        return self.get_job(job_id)

    def renew_lease(self, job_id: str, holder: str, now: float) -> Job:
        """Push a leased, non-terminal job's lease expiry to now + its lease duration."""
        with self._sessions.begin() as s:
            s.execute(
                update(JobRow)
                .where(JobRow.id == job_id, JobRow.lease_seconds > 0, ACTIVE_PHASES_SQL)
                .values(
                    lease_expires_at=now + JobRow.lease_seconds,
                    lease_holder=holder or JobRow.lease_holder,
                    version=JobRow.version + 1,
                )
            )
        return self.get_job(job_id, with_replicas=False)

    def expired_leases(self, now: float) -> list[Job]:
        """Active leased jobs whose client has not heartbeated in time."""
        stmt = select(JobRow).where(
            ACTIVE_PHASES_SQL, JobRow.lease_seconds > 0, JobRow.lease_expires_at < now
        )
        with self._sessions() as s:
            return [job_from_row(r) for r in s.scalars(stmt)]

    def events(self, job_id: str, after_seq: int = 0) -> list[JobEvent]:
        with self._sessions() as s:
            if s.get(JobRow, job_id) is None:
                raise job_not_found(job_id)
            rows = s.scalars(
                select(JobEventRow)
                .where(JobEventRow.job_id == job_id, JobEventRow.seq > after_seq)
                .order_by(JobEventRow.seq)
            )
            return [event_from_row(r) for r in rows]


def _pending_replica(
    job_id: str, name: str, role: Role, index: int, node: str
) -> dict[str, object]:
    """A replica's row as scheduling writes it: placed, not started."""
    return {
        "job_id": job_id, "name": name, "role": role.value, "index": index, "node": node,
        "phase": ReplicaPhase.PENDING.value, "address": "", "pid": 0, "exit_code": None,
        "message": "", "log_tail": "",
    }  # fmt: skip


def _found(changes: Sequence[PhaseChange | NotFound]) -> PhaseChange:
    """The one change of a one-move batch; raises its NotFound."""
    (change,) = changes
    if isinstance(change, NotFound):
        raise change
    return change
