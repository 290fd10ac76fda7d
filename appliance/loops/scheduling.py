"""The scheduler loop: snapshot the queue and the pool, decide with `admit`, apply.

Passes are coalesced: wake-ups that arrive during a pass (a burst of submits) lead to one more
pass, at most every MIN_PASS_GAP seconds. Plans are kept between passes (they never change) and
only pending reasons that differ from the last ones written go to the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from appliance.domain.plan import ReplicaPlan
from appliance.scheduler.admission import admit
from appliance.services.context import Context

log = logging.getLogger(__name__)
MIN_PASS_GAP = 0.1


class SchedulerLoop:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._plans: dict[str, ReplicaPlan] = {}
        self._written: dict[str, str] = {}

    async def run(self) -> None:
        wanted = self.ctx.bus.schedule_wanted
        loop = asyncio.get_running_loop()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wanted.wait(), self.ctx.settings.scheduler_interval)
            wanted.clear()
            started = loop.time()
            try:
                await self.run_once()
            except Exception:  # a failed pass is retried on the next wake-up
                log.exception("scheduler pass failed")
            await asyncio.sleep(max(0.0, started + MIN_PASS_GAP - loop.time()))

    async def run_once(self) -> int:
        """One pass; returns how many jobs were admitted."""
        store = self.ctx.store
        queue = await self.ctx.db(store.queued_jobs, self._plans)
        self._plans = {job.job_id: job.plan for job in queue}
        self._written = {j: r for j, r in self._written.items() if j in self._plans}
        if not queue:
            return 0
        usage = await self.ctx.db(store.pool_usage)
        decision = admit(queue, usage)
        admitted = 0
        for d in decision.admitted:
            change = await self.ctx.schedule(d.job_id, d.placements)
            admitted += change.applied
            self._plans.pop(d.job_id, None)
            self._written.pop(d.job_id, None)
        changed = {j: r for j, r in decision.pending.items() if self._written.get(j) != r}
        if changed:
            await self.ctx.db(store.set_pending_reasons, changed, self.ctx.clock())
            self._written.update(changed)
        return admitted
