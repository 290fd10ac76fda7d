"""JobStore: every read and write of jobs, and the only writer of job phase.

`set_phase` (and `set_phases`, its batch form) checks the transition table and writes with
compare-and-set on the current phase, recording an event in the same transaction. Leaving the
resource-holding phases releases the job's placements in that same transaction, so the pool
can never leak. The writes themselves are in store/phase_writes.py.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from sqlalchemy import (
    Engine,
    and_,
    bindparam,
    delete,
    func,
    insert,
    or_,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.engine import RowMapping
from sqlalchemy.orm import Session, sessionmaker

from appliance.domain.errors import Conflict, InvalidSpec, NotFound
from appliance.domain.inventory import Node, NodeKind, NodeState, NodeUsage
from appliance.domain.job import EventKind, Job, JobEvent, Lease, Progress, Replica, ReplicaPhase
from appliance.domain.listing import DEFAULT_LIMIT, MAX_KEYS_LIMIT, MAX_LIMIT, JobKey, JobQuery
from appliance.domain.phases import (
    Phase,
)
from appliance.domain.plan import ReplicaGroup, ReplicaPlan, Role
from appliance.domain.queue import Placement, QueuedJob
from appliance.domain.spec import JobSpec, Mode, Priority, validate_labels
from appliance.store.phase_writes import PhaseChange as PhaseChange
from appliance.store.phase_writes import PhaseMove as PhaseMove
from appliance.store.phase_writes import write_phases
from appliance.store.tables import (
    ACTIVE_PHASES_SQL,
    QUEUED_SQL,
    JobEventRow,
    JobLabelRow,
    JobRow,
    NodeRow,
    PlacementRow,
    ReplicaRow,
)

_PRIORITIES = {int(p): p for p in Priority}  # a dict lookup, not an Enum call, per queued row
_QUEUE_AHEAD_SQLITE = text(
    "SELECT count(*) FROM jobs INDEXED BY ix_jobs_queue WHERE phase = 'QUEUED' "
    "AND (priority, created_at, id) < (:priority, :created_at, :id)"
)


@dataclasses.dataclass(frozen=True)
class NewJob:
    job_id: str
    user: str
    spec: JobSpec
    plan: ReplicaPlan
    lease_seconds: float = 0.0
    lease_holder: str = ""
    groups: tuple[str, ...] = ()


class JobOwner(NamedTuple):
    """Where a job is and whose it is: what a decision to act on it needs."""

    phase: Phase
    user: str
    groups: tuple[str, ...]


class JobStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        self._pool: list[Node] | None = None

    # ---- pool -------------------------------------------------------------------------------

    def sync_pool(self, nodes: Sequence[Node]) -> None:
        """Make the stored pool match the configured one (names, kinds, capacities).

        A node removed from the configuration is kept while a job holds it, so nothing that
        runs loses its placement; states set by an admin are kept.
        """
        self._pool = None
        with self._sessions.begin() as s:
            existing = {r.name: r for r in s.scalars(select(NodeRow))}
            for node in nodes:
                row = existing.pop(node.name, None)
                if row is None:
                    s.add(
                        NodeRow(
                            name=node.name,
                            kind=node.kind.value,
                            capacity=node.capacity,
                            state=node.state.value,
                        )
                    )
                else:
                    row.kind, row.capacity = node.kind.value, node.capacity
            held = set(s.scalars(select(PlacementRow.node).distinct()))
            for name, row in existing.items():
                if name not in held:
                    s.delete(row)

    def set_node_state(self, names: Iterable[str], state: NodeState) -> int:
        """Mark nodes ok, in error or in maintenance; returns how many exist."""
        with self._sessions.begin() as s:
            result = s.execute(
                update(NodeRow).where(NodeRow.name.in_(list(names))).values(state=state.value)
            )
        self._pool = None
        return int(result.rowcount)  # type: ignore[attr-defined]

    def pool_usage(self) -> list[NodeUsage]:
        with self._sessions() as s:
            used = dict(
                s.execute(
                    select(PlacementRow.node, func.sum(PlacementRow.amount)).group_by(
                        PlacementRow.node
                    )
                ).all()
            )
            return [
                NodeUsage(
                    Node(r.name, NodeKind(r.kind), r.capacity, NodeState(r.state)),
                    int(used.get(r.name, 0)),
                )
                for r in s.scalars(select(NodeRow).order_by(NodeRow.name))
            ]

    def count_by_phase(self) -> dict[Phase, int]:
        """How many jobs are in each phase (an index scan of ix_jobs_phase)."""
        with self._sessions() as s:
            rows = s.execute(select(JobRow.phase, func.count()).group_by(JobRow.phase))
            return {Phase(phase): int(count) for phase, count in rows}

    def cached_pool(self) -> list[Node] | None:
        """The pool's shape if it is cached (no database access), else None."""
        return self._pool

    def pool(self) -> list[Node]:
        """The pool's shape (names, kinds, capacities, states), cached until it changes."""
        if self._pool is None:
            self._pool = [u.node for u in self.pool_usage()]
        return self._pool

    # ---- jobs -------------------------------------------------------------------------------

    def create_job(
        self, job_id: str, user: str, spec: JobSpec, plan: ReplicaPlan, now: float
    ) -> Job:
        """Persist a new QUEUED job with its labels and its first event, all or nothing."""
        return self.create_jobs([NewJob(job_id, user, spec, plan)], now)[0]

    def create_jobs(self, new: Sequence[NewJob], now: float) -> list[Job]:
        """Persist several new QUEUED jobs in one transaction (group commit of submits)."""
        jobs = [
            {
                "id": n.job_id, "user": n.user, "phase": Phase.QUEUED.value,
                "priority": int(n.spec.priority), "mode": n.spec.mode.value,
                "num_csx": n.spec.num_csx, "num_steps": n.spec.num_steps,
                "model_dir": n.spec.model_dir, "params_yaml": n.spec.params_yaml,
                "labels": dict(n.spec.labels), "plan": _plan_to_json(n.plan), "reason": "",
                "pending_reason": "waiting for the scheduler", "systems": "",
                "created_at": now, "updated_at": now, "started_at": 0.0, "finished_at": 0.0,
                "progress": {}, "lease_seconds": n.lease_seconds,
                "lease_expires_at": now + n.lease_seconds if n.lease_seconds else 0.0,
                "lease_holder": n.lease_holder, "groups": list(n.groups),
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
        with self.engine.begin() as conn:
            conn.execute(insert(JobRow), jobs)
            if labels:
                conn.execute(insert(JobLabelRow), labels)
            conn.execute(insert(JobEventRow), events)
        return [
            Job(id=n.job_id, user=n.user, spec=n.spec, phase=Phase.QUEUED, created_at=now,
                updated_at=now, pending_reason="waiting for the scheduler",
                lease=_lease(n.lease_seconds, now + n.lease_seconds, n.lease_holder),
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
                raise NotFound(f"job {job_id} not found; list jobs with `csctl get jobs -a`")
            replicas: tuple[Replica, ...] = ()
            if with_replicas:
                replicas = tuple(
                    _replica_from_row(r)
                    for r in s.scalars(select(ReplicaRow).where(ReplicaRow.job_id == job_id))
                )
            position = 0
            if row.phase == Phase.QUEUED.value:
                position = self._queue_position(s, row.priority, row.created_at, row.id)
            job = _job_from_row(row, replicas=_sorted_replicas(replicas), position=position)
            return job, row.version

    def get_jobs(self, job_ids: Sequence[str]) -> list[Job]:
        """Full views of the given jobs, as get_job gives them, in no particular order (unknown
        ids are left out): two queries a chunk instead of two a job."""
        found: list[Job] = []
        with self._sessions() as s:
            conn = s.connection()
            for chunk in _chunks(list(job_ids)):
                replicas: dict[str, list[Replica]] = {}
                for m in conn.execute(_REPLICAS_OF, {"ids": chunk}).mappings():
                    replicas.setdefault(m["job_id"], []).append(_replica_from_row(m))
                for r in conn.execute(_FULL_VIEWS_OF, {"ids": chunk}):
                    position = 0
                    if r.phase == Phase.QUEUED.value:
                        position = self._queue_position(s, r.priority, r.created_at, r.id)
                    own = _sorted_replicas(tuple(replicas.get(r.id, ())))
                    found.append(_job_from_summary(r, r.params_yaml, own, position))
        return found

    def job_version(self, job_id: str) -> tuple[int, int]:
        """(version, queue position) of a job: what a cached full view needs to be checked
        against (the position moves with other jobs, without this job's version)."""
        with self._sessions() as s:
            found = s.execute(
                select(JobRow.version, JobRow.phase, JobRow.priority, JobRow.created_at).where(
                    JobRow.id == job_id
                )
            ).first()
            if found is None:
                raise NotFound(f"job {job_id} not found; list jobs with `csctl get jobs -a`")
            version, phase, priority, created_at = found
            position = 0
            if phase == Phase.QUEUED.value:
                position = self._queue_position(s, priority, created_at, job_id)
            return int(version), position

    def _queue_position(self, s: Session, priority: int, created_at: float, job_id: str) -> int:
        """1 + the queued jobs ahead in queue order, counted on the queue index: the cost grows
        with the position, not with the length of the queue."""
        ahead_of = {"priority": priority, "created_at": created_at, "id": job_id}
        if self.engine.dialect.name == "sqlite":
            # SQLite's planner picks ix_jobs_phase (every queued row) unless told otherwise.
            ahead = s.execute(_QUEUE_AHEAD_SQLITE, ahead_of).scalar()
        else:
            ahead = s.scalar(
                select(func.count())
                .select_from(JobRow)
                .where(
                    QUEUED_SQL,
                    tuple_(JobRow.priority, JobRow.created_at, JobRow.id)
                    < tuple_(priority, created_at, job_id),
                )
            )
        return int(ahead or 0) + 1

    def queue_positions(self, job_ids: Iterable[str]) -> dict[str, int]:
        """1-based queue positions of those of the given jobs that are QUEUED, all from one read
        of the queue in order (its index: a few ms for 10,000 queued jobs), so the positions
        of a listed page are as fresh as that read and agree with each other."""
        wanted = set(job_ids)
        if not wanted:
            return {}
        order = self._driver_rows(_QUEUE_ORDER)
        return {row[0]: n for n, row in enumerate(order, 1) if row[0] in wanted}

    def list_jobs(self, query: JobQuery) -> tuple[list[Job], str]:
        """Newest first, keyset-paginated; returns (job summaries, next page token or "").

        Summaries leave out the params YAML (up to 1 MiB a job) and replicas; get_job has them.
        """
        with self._sessions() as s:
            rows = s.execute(_page_stmt(query, _SUMMARY)).all()
        rows, token = _page(rows, query)
        return [_job_from_summary(r) for r in rows], token

    def list_job_keys(self, query: JobQuery) -> tuple[list[JobKey], str]:
        """Like list_jobs, but only what a caller needs to reuse summaries it already has."""
        columns = (JobRow.id, JobRow.created_at, JobRow.version)  # covered by ix_jobs_created
        rows = self._driver_rows(_page_stmt(query, columns, MAX_KEYS_LIMIT))
        limit = query.limit if query.limit > 0 else DEFAULT_LIMIT
        if len(rows) <= limit:
            return rows, ""
        rows = rows[:limit]
        return rows, _encode_token(rows[-1][1], rows[-1][0])

    def _driver_rows(self, stmt: Any) -> list[Any]:
        """Run a select of plain columns (no type conversions) and return the driver's tuples."""
        compiled = stmt.compile(
            dialect=self.engine.dialect, compile_kwargs={"render_postcompile": True}
        )
        params = compiled.construct_params()
        args: Any = params
        if compiled.positional:
            args = tuple(params[name] for name in compiled.positiontup or ())
        with self.engine.connect() as conn:
            cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
            try:
                cursor.execute(compiled.string, args)
                return list(cursor.fetchall())
            finally:
                cursor.close()

    def job_summaries(self, job_ids: Sequence[str]) -> list[Job]:
        """Summaries of the given jobs, in no particular order (unknown ids are left out)."""
        found: list[Job] = []
        with self.engine.connect() as conn:
            for chunk in _chunks(list(job_ids)):
                rows = conn.execute(_SUMMARIES_OF, {"ids": chunk})
                found += (_job_from_summary(r) for r in rows)
        return found

    def job_owners(self, job_ids: Sequence[str]) -> dict[str, JobOwner]:
        """Phase, owner and owner's groups of the given jobs (unknown ids are left out): what
        a batch of decisions to act on jobs reads, three columns instead of a summary."""
        found: dict[str, JobOwner] = {}
        with self.engine.connect() as conn:
            for chunk in _chunks(list(job_ids)):
                for job_id, phase, user, groups in conn.execute(_OWNERS_OF, {"ids": chunk}):
                    found[job_id] = JobOwner(Phase(phase), user, tuple(groups or ()))
        return found

    def jobs_in(self, phases: Iterable[Phase]) -> list[Job]:
        with self._sessions() as s:
            rows = s.scalars(select(JobRow).where(JobRow.phase.in_([p.value for p in phases])))
            return [_job_from_row(r) for r in rows]

    def plan_of(self, job_id: str) -> ReplicaPlan:
        with self._sessions() as s:
            plan = s.scalar(select(JobRow.plan).where(JobRow.id == job_id))
        if plan is None:
            raise NotFound(f"job {job_id} not found")
        return _plan_from_json(plan)

    def queued_jobs(self, known: Mapping[str, ReplicaPlan] | None = None) -> list[QueuedJob]:
        """The queue snapshot the scheduler decides on, in queue order.

        Plans never change, so a caller that keeps them passes `known` and only the plans of
        jobs it has not seen are read and decoded.
        """
        known = known or {}
        order = (
            select(JobRow.id, JobRow.priority, JobRow.created_at)
            .where(QUEUED_SQL)
            .order_by(JobRow.priority, JobRow.created_at, JobRow.id)
        )
        rows = self._driver_rows(order)  # the whole queue on every pass: no per-row objects
        missing = [row[0] for row in rows if row[0] not in known]
        plans = dict(known)
        if missing:
            with self._sessions() as s:
                for chunk in _chunks(missing):
                    stmt = select(JobRow.id, JobRow.plan).where(JobRow.id.in_(chunk))
                    plans.update((i, _plan_from_json(plan)) for i, plan in s.execute(stmt))
        priorities = _PRIORITIES
        return [
            QueuedJob(job_id, priorities[prio], created, plans[job_id])
            for job_id, prio, created in rows
            if job_id in plans
        ]

    # ---- phase: the one writer ----------------------------------------------------------------

    def set_phase(
        self, job_id: str, target: Phase, reason: str, now: float, expected: Phase | None = None
    ) -> PhaseChange:
        """Move a job to `target` if the table allows it; record the event; release resources.

        `expected` pins the phase the caller decided on (compare-and-set); without it the
        current phase is read in the same transaction. Raises NotFound for an unknown job.
        """
        with self._sessions.begin() as s:
            move = PhaseMove(job_id, target, reason, expected)
            return _found(write_phases(s.connection(), [move], now))

    def set_phases(self, moves: Sequence[PhaseMove], now: float) -> list[PhaseChange | NotFound]:
        """set_phase for several jobs in one transaction (group commit of cancels).

        Each move is checked and compare-and-set on its own, and gets its own outcome, in
        order: an unknown job is a NotFound in its place, not a failure of the others; a job
        named twice sees the effect of its earlier move.
        """
        with self._sessions.begin() as s:
            return write_phases(s.connection(), moves, now)

    def schedule(self, job_id: str, placements: Sequence[Placement], now: float) -> PhaseChange:
        """QUEUED -> SCHEDULED with the job's placements and replica rows, all or nothing."""
        systems = [p.node for p in placements if p.role is Role.CS2]
        reason = "reserved " + ", ".join(systems) if systems else "reserved"
        with self._sessions.begin() as s:
            move = PhaseMove(job_id, Phase.SCHEDULED, reason, Phase.QUEUED)
            extra = {"systems": ",".join(systems)}
            change = _found(write_phases(s.connection(), [move], now, extra))
            if not change.applied:
                return change
            s.add_all(
                PlacementRow(job_id=job_id, replica=p.replica, node=p.node, amount=p.amount)
                for p in placements
            )
            node_of = {p.replica: p.node for p in placements}
            plan = _plan_from_json(s.scalar(select(JobRow.plan).where(JobRow.id == job_id)))
            s.add_all(
                ReplicaRow(
                    job_id=job_id,
                    name=name,
                    role=role.value,
                    index=index,
                    node=node_of.get(name, "mgmt"),
                    phase=ReplicaPhase.PENDING.value,
                    address="",
                    pid=0,
                    exit_code=None,
                    message="",
                    log_tail="",
                )
                for name, role, index in plan.replica_names()
            )
            return change

    def set_pending_reasons(self, reasons: Mapping[str, str], now: float) -> int:
        """Write the reasons of queued jobs that changed; returns how many changed."""
        changed = []
        with self._sessions.begin() as s:
            for chunk in _chunks(list(reasons)):
                current = s.execute(
                    select(JobRow.id, JobRow.pending_reason).where(
                        JobRow.id.in_(chunk), JobRow.phase == Phase.QUEUED.value
                    )
                )
                changed += [
                    {"b_job": j, "b_reason": reasons[j]} for j, r in current if reasons[j] != r
                ]
            if changed:
                # Rows in id order, the order every multi-row writer locks them in (see
                # phase_writes), so this and a batch of cancels cannot deadlock.
                changed.sort(key=lambda row: row["b_job"])
                s.connection().execute(
                    update(JobRow)
                    .where(JobRow.id == bindparam("b_job"), JobRow.phase == Phase.QUEUED.value)
                    .values(pending_reason=bindparam("b_reason"), version=JobRow.version + 1),
                    changed,
                )
        return len(changed)

    def set_condition(self, job_id: str, phase: Phase, text: str) -> bool:
        """Say why a job in `phase` is not moving on (shown like a pending reason)."""
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

    # ---- replicas and progress ----------------------------------------------------------------

    def update_replica(
        self, job_id: str, name: str, *, only_from: ReplicaPhase | None = None, **fields: Any
    ) -> bool:
        """Update a replica row; returns False if the job has no such replica.

        With `only_from`, a new `phase` is written only while the replica is in that phase
        (the other fields are written regardless), so a late event cannot move it back.
        """
        phase = fields.pop("phase", None)
        where = (ReplicaRow.job_id == job_id, ReplicaRow.name == name)
        with self._sessions.begin() as s:
            if s.scalar(select(ReplicaRow.name).where(*where)) is None:
                return False
            if fields:
                s.execute(update(ReplicaRow).where(*where).values(**fields))
            if phase is not None:
                stmt = update(ReplicaRow).where(*where).values(phase=ReplicaPhase(phase).value)
                if only_from is not None:
                    stmt = stmt.where(ReplicaRow.phase == only_from.value)
                s.execute(stmt)
            # A job's full view shows its replicas: cached views are keyed by this version.
            s.execute(update(JobRow).where(JobRow.id == job_id).values(version=JobRow.version + 1))
            return True

    def replicas(self, job_id: str) -> list[Replica]:
        with self._sessions() as s:
            rows = s.scalars(select(ReplicaRow).where(ReplicaRow.job_id == job_id))
            return list(_sorted_replicas(tuple(_replica_from_row(r) for r in rows)))

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

    def set_progress(self, job_id: str, progress: Progress) -> None:
        with self._sessions.begin() as s:
            s.execute(
                update(JobRow)
                .where(JobRow.id == job_id, ACTIVE_PHASES_SQL)  # terminal jobs never change
                .values(progress=dataclasses.asdict(progress), version=JobRow.version + 1)
            )

    # ---- priority, labels, leases -----------------------------------------------------------

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
                    raise NotFound(f"job {job_id} not found; list jobs with `csctl get jobs -a`")
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
                raise NotFound(f"job {job_id} not found; list jobs with `csctl get jobs -a`")
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
            return [_job_from_row(r, summary=True) for r in s.scalars(stmt)]

    def node_holders(self) -> dict[str, list[str]]:
        """Which jobs hold something on each node."""
        stmt = select(PlacementRow.node, PlacementRow.job_id).distinct()
        holders: dict[str, list[str]] = {}
        with self._sessions() as s:
            for node, job_id in s.execute(stmt):
                holders.setdefault(node, []).append(job_id)
        return {node: sorted(jobs) for node, jobs in holders.items()}

    def events(self, job_id: str, after_seq: int = 0) -> list[JobEvent]:
        with self._sessions() as s:
            if s.get(JobRow, job_id) is None:
                raise NotFound(f"job {job_id} not found")
            rows = s.scalars(
                select(JobEventRow)
                .where(JobEventRow.job_id == job_id, JobEventRow.seq > after_seq)
                .order_by(JobEventRow.seq)
            )
            return [_event_from_row(r) for r in rows]


def _found(changes: Sequence[PhaseChange | NotFound]) -> PhaseChange:
    """The one change of a one-move batch; raises its NotFound."""
    (change,) = changes
    if isinstance(change, NotFound):
        raise change
    return change


# ---- row conversion -------------------------------------------------------------------------


def _plan_to_json(plan: ReplicaPlan) -> dict[str, Any]:
    return {
        "model_bytes": plan.model_bytes,
        "groups": [[g.role.value, g.count, g.demand] for g in plan.groups],
    }


def _plan_from_json(data: Mapping[str, Any] | None) -> ReplicaPlan:
    assert data is not None
    groups = tuple(ReplicaGroup(Role(r), int(c), int(d)) for r, c, d in data["groups"])
    return ReplicaPlan(groups=groups, model_bytes=int(data["model_bytes"]))


def _job_from_row(
    row: JobRow, *, replicas: tuple[Replica, ...] = (), position: int = 0, summary: bool = False
) -> Job:
    spec = JobSpec(
        params_yaml="" if summary else row.params_yaml,
        num_csx=row.num_csx,
        num_steps=row.num_steps,
        mode=Mode(row.mode),
        labels=dict(row.labels or {}),
        priority=Priority(row.priority),
        model_dir=row.model_dir,
    )
    return Job(
        id=row.id,
        user=row.user,
        spec=spec,
        phase=Phase(row.phase),
        created_at=row.created_at,
        updated_at=row.updated_at,
        reason=row.reason,
        pending_reason=row.pending_reason,
        queue_position=position,
        systems=tuple(filter(None, row.systems.split(","))),
        progress=Progress(**row.progress) if row.progress else Progress(),
        started_at=row.started_at,
        finished_at=row.finished_at,
        replicas=replicas,
        lease=_lease(row.lease_seconds, row.lease_expires_at, row.lease_holder),
        groups=tuple(row.groups or ()),
    )


def _lease(seconds: float, expires_at: float, holder: str) -> Lease | None:
    return Lease(seconds, expires_at, holder) if seconds > 0 else None


def _replica_from_row(r: ReplicaRow | RowMapping) -> Replica:
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


def _sorted_replicas(replicas: tuple[Replica, ...]) -> tuple[Replica, ...]:
    return tuple(sorted(replicas, key=lambda r: (_ROLE_ORDER[r.role], r.index)))


def _event_from_row(r: JobEventRow) -> JobEvent:
    return JobEvent(
        job_id=r.job_id,
        kind=EventKind.PHASE,
        time=r.time,
        seq=r.seq,
        from_phase=Phase(r.from_phase) if r.from_phase else None,
        to_phase=Phase(r.to_phase),
        reason=r.reason,
    )


_SUMMARY = (
    JobRow.id, JobRow.user, JobRow.phase, JobRow.priority, JobRow.mode, JobRow.num_csx,
    JobRow.num_steps, JobRow.model_dir, JobRow.labels, JobRow.reason, JobRow.pending_reason,
    JobRow.systems, JobRow.created_at, JobRow.updated_at, JobRow.started_at, JobRow.finished_at,
    JobRow.progress, JobRow.lease_seconds, JobRow.lease_expires_at, JobRow.lease_holder,
    JobRow.groups,
)  # fmt: skip


# Built once: a statement object carries its compiled form from call to call.
_SUMMARIES_OF = select(*_SUMMARY).where(JobRow.id.in_(bindparam("ids", expanding=True)))
_FULL_VIEWS_OF = select(*_SUMMARY, JobRow.params_yaml).where(
    JobRow.id.in_(bindparam("ids", expanding=True))
)
_QUEUE_ORDER = (
    select(JobRow.id).where(QUEUED_SQL).order_by(JobRow.priority, JobRow.created_at, JobRow.id)
)
_OWNERS_OF = select(JobRow.id, JobRow.phase, JobRow.user, JobRow.groups).where(
    JobRow.id.in_(bindparam("ids", expanding=True))
)
_REPLICAS_OF = select(*ReplicaRow.__table__.columns).where(
    ReplicaRow.job_id.in_(bindparam("ids", expanding=True))
)


def _page_stmt(query: JobQuery, columns: Sequence[Any], max_limit: int = MAX_LIMIT) -> Any:
    """One page of a list query: filters, keyset position, newest first, one row extra."""
    limit = query.limit if query.limit > 0 else DEFAULT_LIMIT
    if limit > max_limit:
        raise InvalidSpec(f"limit must be at most {max_limit}", field="limit")
    stmt = select(*columns)
    if query.phases:
        stmt = stmt.where(JobRow.phase.in_(sorted(p.value for p in query.phases)))
    elif not query.include_terminal:
        stmt = stmt.where(ACTIVE_PHASES_SQL)
    if query.user:
        stmt = stmt.where(JobRow.user == query.user)
    for key, value in query.labels.items():
        stmt = stmt.where(
            select(JobLabelRow.job_id)
            .where(
                JobLabelRow.job_id == JobRow.id, JobLabelRow.key == key, JobLabelRow.value == value
            )
            .exists()
        )
    if query.page_token:
        created, last_id = _decode_token(query.page_token)
        stmt = stmt.where(
            or_(
                JobRow.created_at < created,
                and_(JobRow.created_at == created, JobRow.id < last_id),
            )
        )
    return stmt.order_by(JobRow.created_at.desc(), JobRow.id.desc()).limit(limit + 1)


def _page(rows: Sequence[Any], query: JobQuery) -> tuple[Sequence[Any], str]:
    """Trim the extra row; the token points after the last row kept (rows start id, created)."""
    limit = query.limit if query.limit > 0 else DEFAULT_LIMIT
    if len(rows) <= limit:
        return rows, ""
    rows = rows[:limit]
    return rows, _encode_token(rows[-1].created_at, rows[-1].id)


def _job_from_summary(
    r: Any, params_yaml: str = "", replicas: tuple[Replica, ...] = (), position: int = 0
) -> Job:
    """A job from a row of _SUMMARY columns (what a list shows), or a full view when given the
    params YAML, the replicas and the queue position."""
    spec = JobSpec(
        params_yaml=params_yaml, num_csx=r.num_csx, num_steps=r.num_steps, mode=Mode(r.mode),
        labels=r.labels or {}, priority=Priority(r.priority), model_dir=r.model_dir,
    )  # fmt: skip
    return Job(
        id=r.id, user=r.user, spec=spec, phase=Phase(r.phase), created_at=r.created_at,
        updated_at=r.updated_at, reason=r.reason, pending_reason=r.pending_reason,
        systems=tuple(filter(None, r.systems.split(","))),
        progress=Progress(**r.progress) if r.progress else _NO_PROGRESS,
        started_at=r.started_at, finished_at=r.finished_at,
        lease=_lease(r.lease_seconds, r.lease_expires_at, r.lease_holder),
        groups=tuple(r.groups or ()), replicas=replicas, queue_position=position,
    )  # fmt: skip


_NO_PROGRESS = Progress()


def _chunks(items: list[str], size: int = 500) -> Iterator[list[str]]:
    """Split IN lists: SQLite and PostgreSQL both cap bound parameters per statement."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _encode_token(created_at: float, job_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([created_at, job_id]).encode()).decode()


def _decode_token(token: str) -> tuple[float, str]:
    try:
        created, job_id = json.loads(base64.urlsafe_b64decode(token.encode()))
        if not math.isfinite(float(created)) or not isinstance(job_id, str):
            raise ValueError(token)
        return float(created), job_id
    except (ValueError, TypeError):
        raise InvalidSpec("page_token is not one this server issued", field="page_token") from None
