"""The scheduler loop: snapshot the queue and the pool, decide with `admit`, apply.

Passes are coalesced: wake-ups that arrive during a pass (a burst of submits) lead to one more
pass, at most every MIN_PASS_GAP seconds. Plans are kept between passes (they never change) and
only pending reasons that differ from the last ones written go to the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Sequence

from appliance.domain.inventory import NodeUsage
from appliance.domain.plan import ReplicaPlan
from appliance.domain.queue import QueuedJob, RunningJob
from appliance.scheduler.admission import admit
from appliance.scheduler.preemption import choose_victims
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
        pending = dict(decision.pending)
        # Only on a pass that admitted nothing: `usage` is then what the head really faces
        # (the next pass, at most MIN_PASS_GAP later, sees what this one admitted).
        preempting = not decision.admitted and self.ctx.settings.preemption_policy != "never"
        if decision.head is not None and preempting:
            head = decision.head.job_id
            pending[head] = await self._preempt_for(decision.head, usage, pending[head])
        admitted = 0
        for d in decision.admitted:
            change = await self.ctx.schedule(d.job_id, d.placements)
            admitted += change.applied
            self._plans.pop(d.job_id, None)
            self._written.pop(d.job_id, None)
        changed = {j: r for j, r in pending.items() if self._written.get(j) != r}
        if changed:
            await self.ctx.db(store.set_pending_reasons, changed, self.ctx.clock())
            self._written.update(changed)
        return admitted

    async def _preempt_for(self, head: QueuedJob, usage: Sequence[NodeUsage], waits: str) -> str:
        """Ask the victims that make room for `head` to stop (checkpoint first when they can);
        returns the head's pending reason: whom it waits for, else `waits` (with the jobs
        that would make room but may not be preempted, when there are)."""
        settings = self.ctx.settings
        now = self.ctx.clock()
        running = await self.ctx.db(
            self.ctx.store.running_jobs, settings.preemption_min_run_seconds
        )
        chosen = choose_victims(head, running, usage, now)
        if chosen is None:
            return waits + _exempt(head, running, usage, now)
        reason = f"preempted by {head.job_id} ({head.priority.name})"
        for victim in chosen.victims:
            grace = settings.preemption_grace_seconds if victim.checkpointable else 0.0
            await self.ctx.request_requeue(
                victim.job_id, victim.attempt, reason, checkpoint_within=grace,
                preempted_by=head.job_id,
            )  # fmt: skip
        stopping = (*chosen.waiting_for, *chosen.victims)
        names = ", ".join(f"{v.job_id} ({v.priority.name})" for v in stopping)
        how = "checkpoint and stop" if any(v.checkpointable for v in stopping) else "stop"
        return f"waiting to preempt {names}: they {how}"


def _exempt(
    head: QueuedJob, running: Sequence[RunningJob], usage: Sequence[NodeUsage], now: float
) -> str:
    """What to add to the head's reason when jobs that may not be preempted (opted out, or
    preempted recently) are what keeps it waiting: "; not preempting ...", else ""."""
    freed = [
        dataclasses.replace(r, preemptible=True, protected_until=0.0)
        if int(r.priority) > int(head.priority) and not r.stopping
        else r
        for r in running
    ]
    chosen = choose_victims(head, freed, usage, now)
    if chosen is None or not chosen.victims:
        return ""
    exempt = {r.job_id: r for r in running if not r.preemptible or r.protected_until > now}
    names = [_why_exempt(exempt[v.job_id], now) for v in chosen.victims if v.job_id in exempt]
    return f"; not preempting {', '.join(names)}" if names else ""


def _why_exempt(job: RunningJob, now: float) -> str:
    if not job.preemptible:
        return f"{job.job_id} (never preempted)"
    until = time.strftime("%H:%M:%S", time.localtime(job.protected_until))
    return f"{job.job_id} (preempted before: not until {until})"
