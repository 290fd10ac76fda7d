"""Estimated starts of queued jobs, for every door (GetJob, ListJobs, REST, the watch).

The model is scheduler/start_estimates.py. What it is fed is read here: the pool's usable
systems, the jobs holding systems with their progress (steps left over their rate, from the
chief's last report), and the first MAX_ESTIMATED queued jobs in queue order (priority, then
submit time, all queues together) with how long each would run: from its own last rate (a
requeued job), else from the step time it asks of the simulated backend, else from the
coordinator's (`sim_step_seconds` with the sim backend), else unknown; and never longer than
its time limit (domain/time_limits.py), which bounds a job whose rate is unknown too: a running
job ends by its start plus its limit at the latest. Reservations' windows are busy for the jobs
they are not for. Estimates are
computed at most every `max_age` seconds, and only when a door shows a queued job: like
queue positions they are read on every call, never stored.
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from appliance.domain.inventory import NodeKind, NodeState
from appliance.domain.job import Job
from appliance.domain.listing import MAX_LIMIT, JobQuery
from appliance.domain.phases import HOLDS_RESOURCES, Phase
from appliance.domain.plan import Role
from appliance.domain.spec import sim_step_seconds
from appliance.scheduler.start_estimates import Holder, Waiting, Window, estimate_starts
from appliance.services.backlog_view import BacklogView
from appliance.services.fair_reads import as_system
from appliance.store.jobs import JobStore

MAX_ESTIMATED = 500  # queued jobs given an estimate, in queue order
MAX_AGE_SECONDS = 2.0


class StartEstimates:
    """Estimated start times of queued jobs, recomputed when older than `max_age` seconds."""

    def __init__(
        self,
        store: JobStore,
        read: Callable[..., Awaitable[Any]],
        queue: BacklogView,
        clock: Callable[[], float],
        default_step_seconds: float | None = None,
        max_age: float = MAX_AGE_SECONDS,
    ) -> None:
        self._store = store
        self._read = read
        self._queue = queue
        self._clock = clock
        # A simulating backend's step time (Backend.simulated_step_seconds), set once wired.
        self.default_step_seconds = default_step_seconds
        self._max_age = max_age
        self._found: dict[str, float] = {}
        self._made = -float("inf")  # monotonic time of the last computation
        self._making: asyncio.Future[dict[str, float]] | None = None

    async def of(self, job_ids: Iterable[str]) -> dict[str, float]:
        """The estimated starts (Unix times) of those of the given queued jobs that have one."""
        found = await self._current()
        return {job_id: found[job_id] for job_id in job_ids if job_id in found}

    async def shown(self, job: Job) -> Job:
        """`job` with its estimated start, if it is queued and has one."""
        if job.phase is not Phase.QUEUED:
            return job
        start = (await self.of([job.id])).get(job.id, 0.0)
        if start == job.estimated_start:
            return job
        return dataclasses.replace(job, estimated_start=start)

    async def _current(self) -> dict[str, float]:
        if time.monotonic() - self._made < self._max_age:
            return self._found
        if self._making is None:  # one computation at a time; the others wait for it
            self._making = asyncio.ensure_future(self._compute())
        making = self._making
        try:
            return await asyncio.shield(making)
        finally:
            if making.done() and self._making is making:
                self._making = None

    async def _compute(self) -> dict[str, float]:
        with as_system():  # for every caller, not the one whose call started it
            return await self._computed()

    async def _computed(self) -> dict[str, float]:
        index = await self._queue.current()
        first = heapq.nsmallest(
            MAX_ESTIMATED,
            (job for queue in index.queues() for job in _first(index.in_order(queue))),
            key=lambda job: job.order,
        )
        pool = self._store.cached_pool() or await self._read(self._store.pool)
        usable = {n.name for n in pool if n.kind is NodeKind.SYSTEM and n.state is NodeState.OK}
        holding_query = JobQuery(phases=frozenset(HOLDS_RESOURCES), limit=MAX_LIMIT)
        keys, _ = await self._read(self._store.list_job_keys, holding_query)
        ids = [key[0] for key in keys] + [job.job_id for job in first]
        jobs = {job.id: job for job in await self._read(self._store.job_summaries, ids)}
        now = self._clock()
        holders = [
            Holder(sum(1 for s in job.systems if s in usable), self._ends_at(job, now))
            for key in keys
            if (job := jobs.get(key[0])) is not None
        ]
        live = [r for r in await self._read(self._store.reservations) if r.end > now]
        windows = [
            Window(r.name, r.start, r.end, sum(1 for n in r.nodes if n in usable)) for r in live
        ]
        waiting = [
            Waiting(
                entry.job_id,
                entry.plan.group(Role.CS2).count,
                self._seconds(found),
                frozenset(
                    r.name for r in live if not r.admits(entry.user, entry.groups, entry.queue)
                ),
            )
            for entry in first
            if (found := jobs.get(entry.job_id)) is not None
        ]
        self._found = estimate_starts(now, len(usable), holders, waiting, windows)
        self._made = time.monotonic()
        return self._found

    def _ends_at(self, job: Job, now: float) -> float | None:
        """When a job holding systems is expected to end: its steps left over its rate, counted
        from its last report; before it reports, as a queued job would run from now."""
        progress = job.progress
        limit = job.spec.time_limit_seconds
        began = job.started_at if job.phase is Phase.RUNNING and job.started_at > 0 else now
        by_limit = None if limit is None else max(now, began + limit)
        if job.phase is Phase.RUNNING and progress.steps_per_second > 0:
            left = max(0, job.spec.num_steps - progress.step) / progress.steps_per_second
            return _earlier(max(now, (progress.reported_at or now) + left), by_limit)
        seconds = self._seconds(job)
        return _earlier(None if seconds is None else now + seconds, by_limit)

    def _seconds(self, job: Job) -> float | None:
        """How long a job would run from the start of its next attempt (None: unknown), at
        most its time limit."""
        steps = max(0, job.spec.num_steps - job.progress.checkpoint_step)
        limit = job.spec.time_limit_seconds
        if job.progress.steps_per_second > 0:
            return _earlier(steps / job.progress.steps_per_second, limit)
        step = sim_step_seconds(job.spec.labels)
        if step is None:
            step = self.default_step_seconds
        return _earlier(None if step is None else steps * step, limit)


def _earlier(when: float | None, bound: float | None) -> float | None:
    """The lower of two bounds, either of them unknown (None)."""
    if when is None:
        return bound
    return when if bound is None else min(when, bound)


def _first(jobs: Iterable[Any]) -> Iterable[Any]:
    """At most MAX_ESTIMATED of a queue's jobs, in its order; held ones left out (they have no
    start to estimate, and those behind them do not wait for them)."""
    n = 0
    for job in jobs:
        if job.hold is not None:
            continue
        if n >= MAX_ESTIMATED:
            return
        n += 1
        yield job
