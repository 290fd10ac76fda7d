"""Time limits enforced: a running job whose running time (summed over its attempts) reached
its limit is asked for a checkpoint within the grace (APPLIANCE_TIME_LIMIT_GRACE_SECONDS),
through the same request a preemption makes (store/requeues.py), and the Requeuer
(loops/requeuing.py) then tears it down and ends it in TIMEOUT with ReasonCode.TimeLimit.
Checked on the reconciler's timed sweep, on the injected clock."""

from __future__ import annotations

from appliance.config import TimeLimitSettings
from appliance.domain.reasons import ReasonCode, said
from appliance.domain.time_limits import format_time_limit
from appliance.services.context import Context


class TimeLimits:
    """Asks the jobs at their time limit to stop."""

    def __init__(self, ctx: Context, settings: TimeLimitSettings = TimeLimitSettings()) -> None:
        self.ctx = ctx
        self.settings = settings

    async def enforce(self) -> int:
        """Ask every running job at its limit for its checkpoint and its end (a job without a
        model dir has no checkpoint to write: it ends at once). Returns how many were asked."""
        asked = 0
        for job in await self.ctx.db(self.ctx.store.over_time_limit, self.ctx.clock()):
            reason = said(ReasonCode.TIME_LIMIT, limit=format_time_limit(job.limit))
            within = self.settings.grace_seconds if job.checkpointable else 0.0
            if await self.ctx.request_requeue(
                job.job_id, job.attempt, reason, checkpoint_within=within
            ):
                asked += 1
        return asked
