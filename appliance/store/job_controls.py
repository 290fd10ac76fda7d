"""What users change on a job besides its phase: its priority and labels, and its lease."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sqlalchemy import delete, insert, select, update

from appliance.domain.errors import Conflict, job_not_found
from appliance.domain.job import Job
from appliance.domain.spec import Priority, validate_labels
from appliance.store.job_reads import JobReadStore
from appliance.store.rows import job_from_row
from appliance.store.tables import ACTIVE_PHASES_SQL, JobLabelRow, JobRow


class JobControlStore(JobReadStore):
    """JobStore's part for priority, labels and leases."""

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
