"""The queue in the store: queued jobs in queue order, positions, pending reasons.

Queue order is (priority, submit time, id), the index ix_jobs_queue; a job's position is its
place among the queued jobs of its own queue (APPLIANCE queues, domain/queues.py). On SQLite
a position is counted with an index hint, which its planner would not pick by itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from sqlalchemy import bindparam, func, select, text, tuple_, update
from sqlalchemy.orm import Session

from appliance.domain.backlog import QueuedJob
from appliance.domain.holds import hold_of
from appliance.domain.phases import Phase
from appliance.domain.plan import ReplicaPlan
from appliance.domain.spec import Priority
from appliance.store.base import StoreBase, in_chunks
from appliance.store.rows import PLAN_AS_READ, plan_from_json
from appliance.store.tables import QUEUED_SQL, JobRow

_PRIORITIES = {int(p): p for p in Priority}  # a dict lookup, not an Enum call, per queued row


_QUEUE_AHEAD_SQLITE = text(
    "SELECT count(*) FROM jobs INDEXED BY ix_jobs_queue WHERE phase = 'QUEUED' "
    "AND (priority, created_at, id) < (:priority, :created_at, :id) AND queue = :queue"
)


_QUEUE_ORDER = (
    select(JobRow.id, JobRow.queue)
    .where(QUEUED_SQL)
    .order_by(JobRow.priority, JobRow.created_at, JobRow.id)
)


class BacklogStore(StoreBase):
    """JobStore's part for the queue."""

    def _queue_position(
        self, s: Session, priority: int, created_at: float, job_id: str, queue: str
    ) -> int:
        """1 + the jobs ahead in its queue, in queue order, counted on the queue index: the cost
        grows with the position, not with the length of the queue."""
        ahead_of = {"priority": priority, "created_at": created_at, "id": job_id, "queue": queue}
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
                    JobRow.queue == queue,
                )
            )
        return int(ahead or 0) + 1

    def position_on_requeue(self, job_id: str) -> int:
        """The position the job would take in the queue now (its submit time orders it)."""
        with self._sessions() as s:
            row = s.execute(
                select(JobRow.priority, JobRow.created_at, JobRow.queue).where(JobRow.id == job_id)
            ).first()
            if row is None:
                return 0
            return self._queue_position(s, row.priority, row.created_at, job_id, row.queue)

    def queue_positions(self, job_ids: Iterable[str]) -> dict[str, int]:
        """1-based queue positions of those of the given jobs that are QUEUED, all from one read
        of the queue in order (its index: a few ms for 10,000 queued jobs), so the positions
        of a listed page are as fresh as that read and agree with each other."""
        wanted = set(job_ids)
        if not wanted:
            return {}
        positions: dict[str, int] = {}
        counts: dict[str, int] = {}
        for job_id, queue in self._driver_rows(_QUEUE_ORDER):
            counts[queue] = counts.get(queue, 0) + 1
            if job_id in wanted:
                positions[job_id] = counts[queue]
        return positions

    def queued_jobs(self, known: Mapping[str, ReplicaPlan] | None = None) -> list[QueuedJob]:
        """The queue snapshot the scheduler decides on, in queue order.

        Plans never change, so a caller that keeps them passes `known` and only the plans of
        jobs it has not seen are read and decoded.
        """
        known = known or {}
        order = (
            select(
                JobRow.id, JobRow.priority, JobRow.created_at, JobRow.queue, JobRow.user,
                JobRow.groups, JobRow.hold, JobRow.held_by, JobRow.suspended, JobRow.time_limit,
                JobRow.ran_seconds,
            )
            .where(QUEUED_SQL)
            .order_by(JobRow.priority, JobRow.created_at, JobRow.id)
        )  # fmt: skip
        rows = self._driver_rows(order)  # the whole queue on every pass: no per-row objects
        missing = [row[0] for row in rows if row[0] not in known]
        plans = dict(known)
        if missing:
            with self._sessions() as s:
                for chunk in in_chunks(missing):
                    stmt = select(JobRow.id, PLAN_AS_READ).where(JobRow.id.in_(chunk))
                    plans.update((i, plan_from_json(plan)) for i, plan in s.execute(stmt))
        priorities = _PRIORITIES
        return [
            QueuedJob(
                job_id,
                priorities[prio],
                created,
                plans[job_id],
                queue,
                user,
                _groups(groups),
                hold_of(hold, held_by, suspended) if hold else None,
                _run_limit(limit, ran),
            )
            for (
                job_id,
                prio,
                created,
                queue,
                user,
                groups,
                hold,
                held_by,
                suspended,
                limit,
                ran,
            ) in rows
            if job_id in plans
        ]

    def queued_counts(self) -> dict[tuple[str, Priority], int]:
        """How many jobs wait in each queue at each priority (read at a metrics scrape)."""
        stmt = (
            select(JobRow.queue, JobRow.priority, func.count())
            .where(QUEUED_SQL)
            .group_by(JobRow.queue, JobRow.priority)
        )
        with self._sessions() as s:
            return {(queue, _PRIORITIES[prio]): int(n) for queue, prio, n in s.execute(stmt)}

    def queue_entries(
        self, job_ids: Iterable[str], known: Mapping[str, ReplicaPlan] | None = None
    ) -> tuple[list[QueuedJob], list[str]]:
        """The queue entries of those of the jobs that are QUEUED now, and the ids of the
        others (gone from the queue, or never in it); plans in `known` are not read again."""
        known = known or {}
        entries: list[QueuedJob] = []
        others = set(job_ids)
        with self._sessions() as s:
            for chunk in in_chunks(list(others)):
                stmt = select(
                    JobRow.id, JobRow.priority, JobRow.created_at, JobRow.queue, PLAN_AS_READ,
                    JobRow.user, JobRow.groups, JobRow.hold, JobRow.held_by, JobRow.suspended,
                    JobRow.time_limit, JobRow.ran_seconds,
                ).where(JobRow.id.in_(chunk), QUEUED_SQL)  # fmt: skip
                for (
                    job_id, priority, created, queue, plan, user, groups, hold, held_by,
                    suspended, limit, ran,
                ) in s.execute(stmt):  # fmt: skip
                    decoded = known.get(job_id) or plan_from_json(plan)
                    entries.append(QueuedJob(
                        job_id, _PRIORITIES[priority], created, decoded, queue, user,
                        tuple(groups or ()), hold_of(hold, held_by, suspended),
                        _run_limit(limit, ran),
                    ))  # fmt: skip
                    others.discard(job_id)
        return entries, sorted(others)

    def set_pending_reasons(self, reasons: Mapping[str, str], now: float) -> int:
        """Write the reasons of queued jobs that changed; returns how many changed."""
        changed = []
        with self._sessions.begin() as s:
            for chunk in in_chunks(list(reasons)):
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


def _groups(raw: object) -> tuple[str, ...]:
    """A job's groups as the driver gives the JSON column (text on SQLite, a list on
    PostgreSQL)."""
    if isinstance(raw, str):
        raw = json.loads(raw) if raw else []
    return tuple(str(g) for g in raw) if isinstance(raw, list) else ()


def _run_limit(limit: int, ran: float) -> float | None:
    """What is left of a job's time limit (None: it has none)."""
    return max(0.0, limit - ran) if limit else None
