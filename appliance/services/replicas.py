"""Worker control use cases: what a job's replicas ask of the coordinator.

Every call names the attempt its replica was started for. A replica of an attempt that is over
(one left from before a requeue) is refused: it cannot register, read the topology or write
progress into the attempt that runs now, and its heartbeats tell it to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

from appliance.domain.errors import (
    Conflict,
    DeadlineExceeded,
    NotFound,
    job_not_found,
    stale_attempt,
)
from appliance.domain.job import EventKind, Job, JobEvent, Progress, ReplicaPhase
from appliance.domain.phases import Phase
from appliance.services.context import Context


class ReplicaService:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def register(
        self, job_id: str, attempt: int, replica: str, address: str, pid: int
    ) -> None:
        """A replica serves at `address`; the job runs when all of its replicas have said so."""
        try:
            taken = await self.ctx.db(
                self.ctx.store.register_replica, job_id, attempt, replica, address, pid
            )
        except KeyError:
            raise NotFound(f"job {job_id} has no replica {replica}") from None
        if taken is not None:
            raise Conflict(
                f"{replica} of {job_id} is already registered at {taken}; a replica registers once"
            )
        await self.start_if_all_ready(job_id)

    async def start_if_all_ready(self, job_id: str) -> None:
        replicas = await self.ctx.db(self.ctx.store.replicas, job_id)
        if replicas and all(r.phase is ReplicaPhase.READY for r in replicas):
            await self.ctx.set_phase(
                job_id,
                Phase.RUNNING,
                f"all {len(replicas)} replicas ready",
                expected=Phase.INITIALIZING,
            )

    async def await_running(self, job_id: str, attempt: int, wait_seconds: float) -> Job:
        """Block until `attempt` of the job is RUNNING (every replica registered); then its
        full status.

        Conflict once the job is over (or on another attempt): the caller stops. A job still
        starting after `wait_seconds` is DeadlineExceeded, "not yet": replicas may take as long
        as the backend lets them (a pod pending up to its pending timeout), and the job's own
        timeouts end the wait, so the caller asks again.
        """
        deadline = asyncio.get_running_loop().time() + wait_seconds
        with self.ctx.bus.subscribe(job_id) as changes:
            while True:
                job = await self.ctx.db(self.ctx.store.get_job, job_id)
                if job.attempt != attempt:
                    raise stale_attempt(job_id, attempt, job.attempt)
                if job.phase is Phase.RUNNING:
                    return job
                if job.phase.terminal:
                    raise Conflict(f"job {job_id} is {job.phase.value}: {job.reason}")
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    raise DeadlineExceeded(
                        f"job {job_id} not running after {wait_seconds:.0f} s "
                        f"({job.phase.value}); ask again"
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changes.get(), remaining)

    async def report_progress(
        self, job_id: str, attempt: int, progress: Progress, checkpointed: bool = False
    ) -> Directive:
        """Record the progress of the chief of `attempt` and tell watchers (`checkpointed`: it
        wrote the checkpoint asked of it, at progress.step); returns what it should do next."""
        directive = await self.directive(job_id, attempt)
        # Written even when told to stop (store/replicas.py set_progress says when).
        if await self.ctx.db(self.ctx.store.set_progress, job_id, attempt, progress):
            self.ctx.bus.publish(
                JobEvent(job_id, EventKind.PROGRESS, self.ctx.clock(), progress=progress)
            )
        if checkpointed:
            recorded, withdrawn = await self.ctx.db(
                self.ctx.store.record_checkpoint_now, job_id, attempt, progress.step,
                self.ctx.clock(),
            )  # fmt: skip
            if withdrawn is not None:
                self.ctx.bus.publish(withdrawn)
            if recorded:
                self.ctx.bus.wake_reconciler()  # the requeue (or the preemptor) can go on
                directive = await self.directive(job_id, attempt)
        return directive

    async def directive(self, job_id: str, attempt: int) -> Directive:
        """What a replica of `attempt` should do: go on, checkpoint now (the chief of a job
        being preempted), or stop (the job ended, or this attempt is over)."""
        state = await self.ctx.db(self.ctx.store.stop_state, job_id)
        if state is None:
            raise job_not_found(job_id)
        current = state.attempt == attempt and not state.phase.terminal
        if not current or (state.stopping and not state.checkpoint_wanted):
            return Directive(False, state.phase)
        return Directive(True, state.phase, checkpoint_now=state.checkpoint_wanted)


@dataclasses.dataclass(frozen=True)
class Directive:
    """The coordinator's answer to a replica's heartbeat or progress report."""

    keep_running: bool
    phase: Phase
    checkpoint_now: bool = False
