"""Reading jobs: one job in full (its replicas, its place in its queue, its dependencies and
ended attempts), several at once, their phases, versions and events (listings of summaries are
store/listing.py's)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from sqlalchemy import bindparam, func, select

from appliance.domain.errors import job_not_found
from appliance.domain.job import Job, JobEvent, Replica
from appliance.domain.limits import WAITING
from appliance.domain.phases import Phase
from appliance.store.attempts import AttemptStore
from appliance.store.backlog import BacklogStore
from appliance.store.base import in_chunks
from appliance.store.dependencies import DependencyStore
from appliance.store.rows import (
    SUMMARY,
    event_from_row,
    job_from_row,
    replica_from_row,
    sorted_replicas,
)
from appliance.store.tables import HOLDING_PHASES, JobEventRow, JobRow, ReplicaRow

_FULL_VIEWS_OF = select(*SUMMARY, JobRow.params_yaml).where(
    JobRow.id.in_(bindparam("ids", expanding=True))
)


_REPLICAS_OF = select(*ReplicaRow.__table__.columns).where(
    ReplicaRow.job_id.in_(bindparam("ids", expanding=True))
)


class JobReadStore(BacklogStore, DependencyStore, AttemptStore):
    """JobStore's part for reading jobs."""

    def count_by_phase(self) -> dict[Phase, int]:
        """How many jobs are in each phase (an index scan of ix_jobs_phase)."""
        with self._sessions() as s:
            rows = s.execute(select(JobRow.phase, func.count()).group_by(JobRow.phase))
            return {Phase(phase): int(count) for phase, count in rows}

    def waiting_jobs_of(self, user: str) -> dict[str, int]:
        """`user`'s jobs submitted and not yet running (domain/limits.py WAITING), by queue
        (an index scan of ix_jobs_user: a user's jobs, not the whole table)."""
        phases = [p.value for p in WAITING]
        with self._sessions() as s:
            rows = s.execute(
                select(JobRow.queue, func.count())
                .where(JobRow.user == user, JobRow.phase.in_(phases))
                .group_by(JobRow.queue)
            )
            return {str(queue): int(count) for queue, count in rows}

    def systems_held(self, user: str | None = None) -> dict[str, int]:
        """The CS-2 systems each user's admitted jobs (SCHEDULED to RUNNING) hold now, of
        `user` alone when given: as many rows as jobs hold resources (bounded by the pool)."""
        stmt = select(JobRow.user, JobRow.systems).where(JobRow.phase.in_(HOLDING_PHASES))
        if user is not None:
            stmt = stmt.where(JobRow.user == user)
        held: dict[str, int] = {}
        with self._sessions() as s:
            for owner, systems in s.execute(stmt):
                count = systems.count(",") + 1 if systems else 0
                held[owner] = held.get(owner, 0) + count
        return held

    def held_in_queues(self, queues: Sequence[str]) -> dict[tuple[str, str], tuple[int, int]]:
        """(admitted jobs, CS-2 systems they hold) of each user in each of `queues`, by
        (queue, user): as many rows as jobs hold resources (bounded by the pool)."""
        stmt = select(JobRow.queue, JobRow.user, JobRow.systems).where(
            JobRow.phase.in_(HOLDING_PHASES), JobRow.queue.in_(list(queues))
        )
        held: dict[tuple[str, str], tuple[int, int]] = {}
        with self._sessions() as s:
            for queue, owner, systems in s.execute(stmt):
                jobs, count = held.get((queue, owner), (0, 0))
                held[queue, owner] = (jobs + 1, count + (systems.count(",") + 1 if systems else 0))
        return held

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
