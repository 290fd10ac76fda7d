"""A handle on one wsjob: its id plus the calls a user makes on it.

The handle makes its calls through `JobCalls`, which ApplianceClient provides: the client
module imports this one, never the other way round.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Protocol

from appliance.client.errors import JobCancelled, JobFailed, JobTimedOut
from appliance.client.hold_calls import HoldResult
from appliance.domain.errors import Unavailable
from appliance.domain.job import Job, JobEvent
from appliance.domain.phases import Phase
from appliance.domain.spec import Priority


@dataclasses.dataclass(frozen=True)
class CancelResult:
    """What a cancel request did: `changed` is False when the job had already finished."""

    job: Job
    changed: bool
    message: str = ""


class JobCalls(Protocol):
    """The calls on one job that a handle makes (ApplianceClient's methods of these names)."""

    def get_job(self, job_id: str) -> Job: ...

    def watch(
        self,
        job_id: str,
        *,
        timeout: float | None = None,
        notify: Callable[[str], None] | None = None,
    ) -> Iterator[JobEvent]: ...

    def cancel_job(self, job_id: str, *, reason: str = "") -> CancelResult: ...

    def events(self, job_id: str) -> list[JobEvent]: ...

    def logs(
        self, job_id: str, replica: str | None = None, *, follow: bool = False
    ) -> Iterator[tuple[str, str]]: ...

    def set_priority(self, job_id: str, priority: str | Priority) -> Job: ...

    def hold_job(self, job_id: str) -> HoldResult: ...

    def release_job(self, job_id: str) -> HoldResult: ...

    def suspend_job(self, job_id: str) -> HoldResult: ...

    def resume_job(self, job_id: str) -> HoldResult: ...

    def update_labels(
        self, job_id: str, set: Mapping[str, str] | None = None, remove: Iterable[str] = ()
    ) -> Job: ...


class JobHandle:
    """A submitted (or looked-up) job. Holds only the id; every property asks the server."""

    def __init__(
        self,
        client: JobCalls,
        job_id: str,
        warnings: tuple[str, ...] = (),
        array_id: str = "",
    ) -> None:
        self._client = client
        self._id = job_id
        self.warnings = warnings
        """At submit: one line for each params key accepted but not used (else empty)."""
        self.array_id = array_id
        """Its array's id when it is an array's task (an array's submit hands back its first
        task): `client.array(array_id)` lists them all."""

    @property
    def id(self) -> str:
        """The job's name, `wsjob-...`."""
        return self._id

    @property
    def status(self) -> Job:
        """The job's current status, fetched from the server on every access."""
        return self._client.get_job(self._id)

    def watch(
        self, *, timeout: float | None = None, notify: Callable[[str], None] | None = None
    ) -> Iterator[JobEvent]:
        """Phase changes and progress as they happen; ends after the terminal phase event.
        Rides out a coordinator outage shorter than the job's lease, telling `notify` (default:
        a logged warning) when the coordinator goes away and comes back."""
        return self._client.watch(self._id, timeout=timeout, notify=notify)

    def wait(self, timeout: float | None = None) -> Job:
        """Block until the job is terminal and return its final status.

        Raises JobFailed, JobCancelled or JobTimedOut (each carrying the final Job) unless it
        SUCCEEDED, and
        TimeoutError if `timeout` seconds pass first.
        """
        for _ in self.watch(timeout=timeout):
            pass
        job = self.status
        if job.phase is Phase.FAILED:
            raise JobFailed(job)
        if job.phase is Phase.CANCELLED:
            raise JobCancelled(job)
        if job.phase is Phase.TIMEOUT:
            raise JobTimedOut(job)
        if job.phase is not Phase.SUCCEEDED:
            raise Unavailable(
                f"the event stream of job {self._id} ended while the job is {job.phase}; "
                "the coordinator may be restarting, wait again"
            )
        return job

    def cancel(self, *, reason: str = "") -> CancelResult:
        """Cancel the job; a job that already finished is left as it is (`changed` False)."""
        return self._client.cancel_job(self._id, reason=reason)

    def events(self) -> list[JobEvent]:
        """The job's recorded phase events, oldest first."""
        return self._client.events(self._id)

    def logs(
        self, replica: str | None = None, *, follow: bool = False
    ) -> Iterator[tuple[str, str]]:
        """(replica, line) pairs of the job's logs; with `follow`, until the job ends."""
        return self._client.logs(self._id, replica, follow=follow)

    def set_priority(self, priority: str | Priority) -> Job:
        """Change the job's priority (`"p1"`); the queue re-orders at once."""
        return self._client.set_priority(self._id, priority)

    def hold(self) -> HoldResult:
        """Hold the queued job: it keeps its place and waits until released."""
        return self._client.hold_job(self._id)

    def release(self) -> HoldResult:
        """Release the held job: it takes its place again."""
        return self._client.release_job(self._id)

    def suspend(self) -> HoldResult:
        """Suspend the running job: it checkpoints, gives its systems back and waits held."""
        return self._client.suspend_job(self._id)

    def resume(self) -> HoldResult:
        """Resume the suspended job from its checkpoint."""
        return self._client.resume_job(self._id)

    def update_labels(
        self, set: Mapping[str, str] | None = None, remove: Iterable[str] = ()
    ) -> Job:
        """Add or change labels and remove label keys; returns the updated job."""
        return self._client.update_labels(self._id, set=set, remove=remove)

    def __repr__(self) -> str:
        return f"JobHandle({self._id!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobHandle) and other._id == self._id

    def __hash__(self) -> int:
        return hash(self._id)
