"""The attempts a job has ended (written by the phase writer, store/phase_writes.py)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from appliance.domain.job import Attempt
from appliance.domain.phases import Phase
from appliance.store.base import StoreBase
from appliance.store.tables import AttemptRow


class AttemptStore(StoreBase):
    """JobStore's part for attempts."""

    def attempts(self, job_id: str) -> list[Attempt]:
        """The job's ended attempts, first first (the current one, if any, is not there)."""
        with self._sessions() as s:
            return self._attempts(s, job_id)

    def _attempts(self, s: Session, job_id: str) -> list[Attempt]:
        rows = s.scalars(
            select(AttemptRow).where(AttemptRow.job_id == job_id).order_by(AttemptRow.attempt)
        )
        return [
            Attempt(
                number=r.attempt, scheduled_at=r.scheduled_at, started_at=r.started_at,
                ended_at=r.ended_at, systems=tuple(filter(None, r.systems.split(","))),
                reason=r.reason, ended_in=Phase(r.ended_in), resumed_from=r.resumed_from,
            )
            for r in rows
        ]  # fmt: skip
