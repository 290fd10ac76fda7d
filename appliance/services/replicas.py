"""Worker control use cases: what a job's replicas ask of the coordinator."""

from __future__ import annotations

import asyncio
import contextlib

from appliance.domain.errors import Conflict, NotFound, job_not_found
from appliance.domain.job import EventKind, Job, JobEvent, Progress, ReplicaPhase
from appliance.domain.phases import Phase
from appliance.services.context import Context


class ReplicaService:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def register(self, job_id: str, replica: str, address: str, pid: int) -> None:
        """A replica serves at `address`; the job runs when all of its replicas have said so."""
        try:
            taken = await self.ctx.db(
                self.ctx.store.register_replica, job_id, replica, address, pid
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

    async def await_running(self, job_id: str, wait_seconds: float) -> Job:
        """Block until the job is RUNNING (every replica registered); then its full status."""
        deadline = asyncio.get_running_loop().time() + wait_seconds
        with self.ctx.bus.subscribe(job_id) as changes:
            while True:
                job = await self.ctx.db(self.ctx.store.get_job, job_id)
                if job.phase is Phase.RUNNING:
                    return job
                if job.phase.terminal:
                    raise Conflict(f"job {job_id} is {job.phase.value}: {job.reason}")
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    raise Conflict(f"job {job_id} not running after {wait_seconds:.0f} s")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changes.get(), remaining)

    async def report_progress(self, job_id: str, progress: Progress) -> bool:
        """Record the chief's progress and tell watchers; returns whether to keep running."""
        phase = await self.ctx.db(self.ctx.store.phase_of, job_id)
        if phase is None:
            raise job_not_found(job_id)
        if phase.terminal:
            return False
        await self.ctx.db(self.ctx.store.set_progress, job_id, progress)
        self.ctx.bus.publish(
            JobEvent(job_id, EventKind.PROGRESS, self.ctx.clock(), progress=progress)
        )
        return True

    async def keep_running(self, job_id: str) -> tuple[bool, Phase | None]:
        phase = await self.ctx.db(self.ctx.store.phase_of, job_id)
        return phase is not None and not phase.terminal, phase
