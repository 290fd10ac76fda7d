"""A job's replicas and progress in the store: where each replica serves, its phase and exit,
its data plane, and the progress its chief reports. Writes of an attempt that is over are
refused (its replicas are not the job's any more)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Table, bindparam, exists, func, literal, or_, select, update

from appliance.domain.job import Replica, ReplicaPhase
from appliance.store.base import StoreBase, in_chunks
from appliance.store.rows import replica_from_row, sorted_replicas
from appliance.store.tables import HOLDING_PHASES, JobRow, ReplicaRow

DataPlane = tuple[str, int, str, str]  # job, attempt, replica, what its data plane is

_JOBS = cast(Table, JobRow.__table__)
_REPLICAS = cast(Table, ReplicaRow.__table__)
# Written only when it changed, and only by a replica of the attempt that holds its systems.
_DATA_PLANE = (
    update(_REPLICAS)
    .where(
        _REPLICAS.c.job_id == bindparam("b_job"),
        _REPLICAS.c.name == bindparam("b_name"),
        _REPLICAS.c.data_plane != bindparam("b_text"),
        exists().where(
            _JOBS.c.id == _REPLICAS.c.job_id,
            _JOBS.c.attempt == bindparam("b_attempt"),
            or_(*(_JOBS.c.phase == literal(phase) for phase in HOLDING_PHASES)),
        ),
    )
    .values(data_plane=bindparam("b_text"))
)
_BUMP = update(_JOBS).where(_JOBS.c.id == bindparam("b_job")).values(version=_JOBS.c.version + 1)


class ReplicaStore(StoreBase):
    """JobStore's part for replicas and progress."""

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

    def set_data_planes(self, batch: Sequence[DataPlane]) -> list[bool]:
        """Record what each (job, attempt, replica) says of its data plane, in one transaction;
        answers in order whether it was written: not when the replica said the same before, nor
        for an attempt that is not the job's or no longer holds its systems, nor for a replica
        the job does not have."""
        answers: list[bool] = []
        with self.engine.begin() as s:
            for job_id, attempt, name, text in batch:
                params = {"b_job": job_id, "b_name": name, "b_attempt": attempt, "b_text": text}
                written = bool(s.execute(_DATA_PLANE, params).rowcount)
                if written:  # a job's full view shows its replicas: keyed by its version
                    s.execute(_BUMP, {"b_job": job_id})
                answers.append(written)
        return answers

    def replicas_ready(self, job_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
        """(registered, all) replicas of each of the jobs that has replicas."""
        ready = func.count().filter(ReplicaRow.phase == ReplicaPhase.READY.value)
        stmt = (
            select(ReplicaRow.job_id, ready, func.count())
            .where(ReplicaRow.job_id.in_(bindparam("ids", expanding=True)))
            .group_by(ReplicaRow.job_id)
        )
        counts: dict[str, tuple[int, int]] = {}
        with self._sessions() as s:
            for ids in in_chunks(sorted(set(job_ids))):
                for job_id, registered, total in s.execute(stmt, {"ids": ids}):
                    counts[job_id] = (int(registered), int(total))
        return counts

    def replicas(self, job_id: str) -> list[Replica]:
        with self._sessions() as s:
            rows = s.scalars(select(ReplicaRow).where(ReplicaRow.job_id == job_id))
            return list(sorted_replicas(tuple(replica_from_row(r) for r in rows)))
