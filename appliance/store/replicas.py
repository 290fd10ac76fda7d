"""A job's replicas and progress in the store: where each replica serves, its phase and exit,
and the progress its chief reports. Writes of an attempt that is over are refused (its
replicas are not the job's any more)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import bindparam, func, select, update

from appliance.domain.job import Replica, ReplicaPhase
from appliance.store.base import StoreBase, in_chunks
from appliance.store.rows import replica_from_row, sorted_replicas
from appliance.store.tables import JobRow, ReplicaRow


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
