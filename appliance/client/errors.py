"""Outcomes of waiting on a job that the caller should not mistake for success."""

from __future__ import annotations

from appliance.domain.errors import ApplianceError
from appliance.domain.job import Job


class JobFailed(ApplianceError):
    """The job ended FAILED; `job` is its final status and `job.reason` says why."""

    def __init__(self, job: Job) -> None:
        reason = f": {job.reason}" if job.reason else ""
        super().__init__(f"job {job.id} failed{reason}")
        self.job = job


class JobTimedOut(ApplianceError):
    """The job ended TIMEOUT (its time limit reached); `job` is its final status."""

    def __init__(self, job: Job) -> None:
        reason = f": {job.reason}" if job.reason else ""
        super().__init__(f"job {job.id} timed out{reason}")
        self.job = job


class JobCancelled(ApplianceError):
    """The job ended CANCELLED; `job` is its final status and `job.reason` says by whom."""

    def __init__(self, job: Job) -> None:
        reason = f": {job.reason}" if job.reason else ""
        super().__init__(f"job {job.id} was cancelled{reason}")
        self.job = job
