"""Holds in the store (domain/holds.py): a hold is three columns of the job (`hold`,
`held_by`, `suspended`), written under the row's lock after the domain's rules decided on
what the row holds then; every write bumps the job's version. A job's phase is never
written here: a suspension's requeue goes through the Context like a preemption's."""

from __future__ import annotations

from appliance.domain.auth import Principal
from appliance.domain.errors import job_not_found
from appliance.domain.holds import Hold, check_may_release, hold_of, placed
from appliance.domain.job import Job
from appliance.domain.phases import Phase
from appliance.store.job_reads import JobReadStore
from appliance.store.tables import JobRow


class JobHoldStore(JobReadStore):
    """JobStore's part for holds."""

    def hold_job(self, job_id: str, hold: Hold, now: float) -> tuple[Job, bool]:
        """Put `hold` on the job (a queued one; a running one when it suspends it); False
        when its hold stays as it was (held already, by an admin or by a user again).
        Conflict naming the phase when the job is in no phase for it; NotFound."""
        with self._sessions.begin() as s:
            row = s.get(JobRow, job_id, with_for_update=True)
            if row is None:
                raise job_not_found(job_id)
            current = hold_of(row.hold, row.held_by, row.suspended)
            new = placed(current, hold, job_id, Phase(row.phase))
            if new is not None:
                row.hold, row.held_by, row.suspended = new.kind.value, new.by, new.suspended
                row.updated_at = now
                row.version = row.version + 1
        return self.get_job(job_id, with_replicas=False), new is not None

    def release_job(
        self, job_id: str, by: Principal | None, now: float, *, resume: bool = False
    ) -> tuple[Job, bool]:
        """Take the job's hold off (`resume`: only a suspension's); False when it had none.
        PermissionDenied for a user releasing an admin's hold; NotFound."""
        with self._sessions.begin() as s:
            row = s.get(JobRow, job_id, with_for_update=True)
            if row is None:
                raise job_not_found(job_id)
            current = hold_of(row.hold, row.held_by, row.suspended)
            check_may_release(current, by, job_id, resume=resume)
            if current is not None:
                row.hold, row.held_by, row.suspended = "", "", False
                row.updated_at = now
                row.version = row.version + 1
        return self.get_job(job_id, with_replicas=False), current is not None
