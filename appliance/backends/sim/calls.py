"""The seam between simulated replicas and the coordinator they report to.

A real replica makes these calls over gRPC (the ReplicaControl service); a simulated one makes
them in process, with no channel, no token and no data plane. A backend may not reach the
services layer, so the composition root (appliance/composition) hands the coordinator's
ReplicaService to the simulated backend as a `ReplicaCalls`; tests hand it a recorder of their
own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from appliance.domain.job import Progress


class Directive(Protocol):
    """The coordinator's answer to a report: go on, checkpoint now, or stop."""

    @property
    def keep_running(self) -> bool: ...

    @property
    def checkpoint_now(self) -> bool: ...


class ReplicaCalls(Protocol):
    """What a job's replicas ask of the coordinator (appliance/services/replicas.py)."""

    async def register_gang(
        self, job_id: str, attempt: int, replicas: Sequence[tuple[str, str, int]]
    ) -> bool:
        """The replicas of `attempt` (name, address, pid) are ready, each registered as if
        alone but in one call (a simulated gang is ready at once: a call each cost the
        coordinator a future and a place in a batch per replica, not per job); the job runs
        once all of its replicas are. True when this call moved it to RUNNING."""

    async def wait_running(self, job_id: str, attempt: int, wait_seconds: float) -> None:
        """Return once `attempt` runs; DeadlineExceeded after `wait_seconds` (ask again),
        Conflict once the job is over or on another attempt."""

    async def report_progress(
        self, job_id: str, attempt: int, progress: Progress, checkpointed: bool = False
    ) -> Directive:
        """The chief's progress (`checkpointed`: it wrote the checkpoint asked of it)."""

    async def directive(self, job_id: str, attempt: int) -> Directive:
        """What the replicas of `attempt` should do now, with no progress to report."""
