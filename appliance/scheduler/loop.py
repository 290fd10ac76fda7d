"""The scheduler loop: snapshot the queue and the pool, decide with `admit`, apply."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from appliance.scheduler.admission import admit
from appliance.services.context import Context

log = logging.getLogger(__name__)


class SchedulerLoop:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def run(self) -> None:
        wanted = self.ctx.bus.schedule_wanted
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wanted.wait(), self.ctx.settings.scheduler_interval)
            wanted.clear()
            try:
                await self.run_once()
            except Exception:  # a failed pass is retried on the next wake-up
                log.exception("scheduler pass failed")

    async def run_once(self) -> int:
        """One pass; returns how many jobs were admitted."""
        store = self.ctx.store
        queue = await self.ctx.db(store.queued_jobs)
        if not queue:
            return 0
        usage = await self.ctx.db(store.pool_usage)
        decision = admit(queue, usage)
        admitted = 0
        for d in decision.admitted:
            change = await self.ctx.db(store.schedule, d.job_id, d.placements, self.ctx.clock())
            self.ctx.announce(change)
            admitted += change.applied
        await self.ctx.db(store.set_pending_reasons, decision.pending, self.ctx.clock())
        return admitted
