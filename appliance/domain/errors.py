"""The one error taxonomy. Transports map these once (gRPC codes, HTTP statuses)."""

from __future__ import annotations


class ApplianceError(Exception):
    """Base class; `message` is a sentence a user can act on."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidSpec(ApplianceError):
    """The request is malformed; `field` names the offending field."""


class NotFound(ApplianceError):
    """The named object does not exist."""


class Conflict(ApplianceError):
    """The object is not in a state that allows the operation."""


class Unauthenticated(ApplianceError):
    """Authentication is on and the call carries no valid token."""


class PermissionDenied(ApplianceError):
    """The caller may not do this."""


class InsufficientCapacity(InvalidSpec):
    """The request can never fit the cluster's pool (a kind of invalid spec)."""


class Unavailable(ApplianceError):
    """A dependency (database, backend) cannot be reached right now; retry later."""


class DeadlineExceeded(ApplianceError):
    """A bounded wait ended before what it waited for happened, which may still happen: the
    same call may succeed when made again (a long poll's "not yet")."""


def job_not_found(job_id: str) -> NotFound:
    """The one sentence for a job id that names no job, whichever layer finds out. It names the
    `job_id` field, so a door can say how its users list the jobs that do exist."""
    return NotFound(f"job {job_id} not found", field="job_id")


def stale_attempt(job_id: str, attempt: int, current: int) -> Conflict:
    """A replica of an attempt that is over calls in (a new attempt of the job runs)."""
    return Conflict(
        f"attempt {attempt} of job {job_id} is over (the job is on attempt {current}); "
        "a replica of an earlier attempt stops"
    )


class LimitExceeded(ApplianceError):
    """The caller is over one of their per-user limits (domain/limits.py): `limit` names it,
    `retry_after` is the seconds after which the same call may pass."""

    def __init__(self, message: str, *, limit: str, retry_after: float) -> None:
        super().__init__(message)
        self.limit = limit
        self.retry_after = retry_after
