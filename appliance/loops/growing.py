"""Growing elastic jobs back (scheduler/elastic.py decides): asked of the scheduler loop after
a pass that left no queue's head waiting, at most once per `GROW_EVERY` seconds of its clock
(the read of what runs is not free on a big pool)."""

from __future__ import annotations

from appliance.config import PreemptionSettings
from appliance.domain.reasons import ReasonCode, said
from appliance.scheduler.elastic import to_grow
from appliance.services.context import Context

GROW_EVERY = 1.0  # seconds between two looks at what runs


class Growing:
    def __init__(self, ctx: Context, preemption: PreemptionSettings) -> None:
        self.ctx = ctx
        self.preemption = preemption
        self._looked_at = float("-inf")

    async def maybe_grow(self) -> bool:
        """Ask one running elastic job to requeue at a checkpoint and come back larger, when
        the policy says so; True when one was asked."""
        now = self.ctx.clock()
        if now - self._looked_at < GROW_EVERY:
            return False
        self._looked_at = now
        store, min_run = self.ctx.store, self.preemption.min_run_seconds
        running = await self.ctx.db(store.running_jobs, min_run)
        if not any(job.elastic is not None for job in running):
            return False
        usage = await self.ctx.read(store.pool_usage)
        reservations = await self.ctx.read(store.reservations)  # cached: no read while unchanged
        reserved = {node for r in reservations if r.end > now for node in r.nodes}
        growth = to_grow(running, usage, now, min_run, reserved)
        if growth is None:
            return False
        job, reason = growth.job, said(ReasonCode.GROWING, systems=growth.systems, to=growth.to)
        return await self.ctx.request_requeue(
            job.job_id, job.attempt, reason, checkpoint_within=self.preemption.grace_seconds
        )
