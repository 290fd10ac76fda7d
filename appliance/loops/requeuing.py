"""Requeues: a job's attempt torn down to run again, after a retryable failure, a preemption
or a node taken away, and the job queued again in its place; or, at its time limit
(loops/time_limits.py), torn down the same way, checkpoint first, to end in TIMEOUT.

The request is in the store first (store/requeues.py), bound to the attempt; this carries it
out: tears the whole gang down, waits the backoff, and moves the job back to QUEUED through
the one phase writer, which clears the request in the same transaction. One requeue of a job
at a time; one that fails is tried again by the next sweep.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from appliance.backends.base import Backend, ReplicaEvent
from appliance.config import PreemptionSettings, RestartSettings, TimeLimitSettings
from appliance.domain.reasons import Reason, ReasonCode
from appliance.domain.requeues import RequeueRequest
from appliance.domain.restarts import (
    restart_limit,
    restart_or_fail,
    restate_resume_point,
    retryable,
)
from appliance.services.context import Context

log = logging.getLogger(__name__)


class Requeuer:
    def __init__(
        self,
        ctx: Context,
        backend: Backend,
        active: set[str],
        restarts: RestartSettings = RestartSettings(),
        preemption: PreemptionSettings = PreemptionSettings(),
        time_limits: TimeLimitSettings = TimeLimitSettings(),
    ) -> None:
        self.ctx = ctx
        self.restarts = restarts
        self.preemption = preemption
        self.time_limits = time_limits
        self.backend = backend
        self._active = active  # the reconciler's: a requeued job's replicas are gone
        # Jobs whose attempt is being torn down to run again.
        self.tasks: dict[str, asyncio.Task[None]] = {}

    async def restart_if_allowed(self, event: ReplicaEvent, reason: Reason) -> Reason | None:
        """Restart the job after `reason` if its policy allows (None), else the reason to fail
        it with."""
        settings = self.restarts
        if not retryable(event.exit_code, settings.exit_codes, event.lost):
            return reason
        job = await self.ctx.db(self.ctx.store.get_job, event.job_id, with_replicas=False)
        limit = restart_limit(job.spec.max_restarts, settings.max_restarts)
        requeue, failed = restart_or_fail(reason, limit, job.retries, job.progress.checkpoint_step)
        if requeue is None:
            return failed
        if await self.ctx.request_requeue(event.job_id, job.attempt, requeue, retry=True):
            self.start(
                event.job_id, job.attempt, requeue, settings.backoff_seconds,
                resumes_from=job.progress.checkpoint_step,
            )  # fmt: skip
        return None  # a requeue asked for already, or an attempt that is over: nothing to do

    def when_ready(self, requests: Sequence[RequeueRequest], now: float) -> None:
        """Carry out the requeues asked for: at once, or once the checkpoint asked of the chief
        arrived or its deadline passed (then from the newest complete checkpoint)."""
        for request in requests:
            if request.job_id in self.tasks:
                continue
            reason = request.said
            timeout = reason.code is ReasonCode.TIME_LIMIT  # it ends instead
            if request.checkpoint_by:
                if request.checkpoint_step is not None:
                    reason = reason.but(checkpointed=request.checkpoint_step)
                elif now >= request.checkpoint_by and timeout:
                    grace = self.time_limits.grace_seconds
                    reason = reason.but(no_checkpoint_at_limit=(grace, request.newest_checkpoint))
                elif now >= request.checkpoint_by:
                    grace = self.preemption.grace_seconds
                    reason = reason.but(no_checkpoint=(grace, request.newest_checkpoint))
                else:
                    continue
            self.start(request.job_id, request.attempt, reason, backoff=0.0, ends=timeout)

    def start(
        self,
        job_id: str,
        attempt: int,
        reason: Reason,
        backoff: float,
        resumes_from: int = -1,
        *,
        ends: bool = False,
    ) -> None:
        if job_id in self.tasks:
            return  # one requeue of a job at a time
        task = asyncio.get_running_loop().create_task(
            self._requeue(job_id, attempt, reason, backoff, resumes_from, ends)
        )
        self.tasks[job_id] = task

    async def _requeue(
        self,
        job_id: str,
        attempt: int,
        reason: Reason,
        backoff: float,
        resumes_from: int,
        ends: bool = False,
    ) -> None:
        """Tear the whole gang down, wait `backoff`, then queue the job again: its next
        attempt is scheduled like any queued job, in its place (its submit time orders it).
        A teardown that fails leaves the request for the next sweep to try again.
        `resumes_from` (>= 0): the checkpoint `reason` names; one the chief reported after the
        decision, before it stopped, is the one the next attempt resumes from, and named.
        `ends`: the job ran for its time limit and ends in TIMEOUT instead."""
        try:
            state = await self.ctx.db(self.ctx.store.stop_state, job_id)
            if state is None or state.attempt != attempt or not state.stopping:
                return  # done meanwhile (or cancelled): nothing of this attempt to stop
            if not self.ctx.leadership.acting():
                return  # the leader carries the requeue out
            await self.backend.teardown(job_id)
            if ends:
                await self.ctx.write_phases(
                    self.ctx.store.time_out_now, job_id, attempt, reason, self.ctx.clock()
                )
                self._active.discard(job_id)
                return
            if resumes_from >= 0:
                job = await self.ctx.db(self.ctx.store.get_job, job_id, with_replicas=False)
                reason = restate_resume_point(reason, resumes_from, job.progress.checkpoint_step)
            if backoff:
                await asyncio.sleep(backoff)
            position = await self.ctx.db(self.ctx.store.position_on_requeue, job_id)
            reason = reason.but(position=position)
            await self.ctx.write_phases(
                self.ctx.store.requeue_now, job_id, attempt, reason, self.ctx.clock()
            )
            self._active.discard(job_id)
        except Exception as exc:
            log.warning("requeueing %s: %s; the next sweep tries again", job_id, exc)
        finally:
            self.tasks.pop(job_id, None)
