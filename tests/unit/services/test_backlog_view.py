"""The queue in memory (services/backlog_view.py) stays the store's queue, whatever the doors do:
random sequences of submits, priority changes, cancels (one and in bulk), scheduler passes,
requeues and ends, each through the use case a door calls; after every step the index holds
exactly the queued jobs, in queue order, at the positions the store counts."""

from __future__ import annotations

import asyncio
import random

import pytest

from appliance.domain.phases import HOLDS_RESOURCES, Phase
from appliance.domain.spec import Priority, validate_spec
from appliance.loops.scheduling import SchedulerLoop
from appliance.services.context import Context
from tests.unit.harness import PARAMS, job_service


async def _agrees(ctx: Context) -> None:
    index = await ctx.backlog.current()
    stored = ctx.store.queued_jobs()
    by_queue: dict[str, list[str]] = {}
    for job in stored:
        by_queue.setdefault(job.queue, []).append(job.job_id)
    assert sorted(index.queues()) == sorted(by_queue)
    for name, ids in by_queue.items():
        assert [job.job_id for job in index.in_order(name)] == ids
    positions = ctx.store.queue_positions([job.job_id for job in stored])
    assert await ctx.backlog.positions(positions) == positions
    assert len(index) == len(stored)


@pytest.mark.parametrize("seed", range(12))
async def test_the_index_follows_every_change_of_the_queue(ctx: Context, seed: int) -> None:
    rng = random.Random(seed)
    jobs, loop = job_service(ctx), SchedulerLoop(ctx)
    await _agrees(ctx)  # built from an empty store
    for _ in range(40):
        queued = [job.job_id for job in ctx.store.queued_jobs()]
        holding = [j.id for j in ctx.store.jobs_in(HOLDS_RESOURCES)]
        step = rng.choice(
            ["submit", "submit", "priority", "cancel", "bulk", "pass", "requeue", "end"]
        )
        if step == "submit":
            spec = validate_spec(
                params_yaml=PARAMS, num_csx=rng.choice([1, 2, 4]), num_steps=5,
                priority=rng.choice([Priority.P1, Priority.P2, Priority.P3]),
            )  # fmt: skip
            await jobs.submit(spec, "alice")
        elif step == "priority" and (queued or holding):
            target = rng.choice(queued + holding)
            await jobs.set_priority(target, rng.choice([Priority.P1, Priority.P2, Priority.P3]))
        elif step == "cancel" and queued:
            await jobs.cancel(rng.choice(queued))
        elif step == "bulk" and queued:
            # Concurrent cancels: one transaction (services/cancels.py), as csctl cancel -a.
            await asyncio.gather(
                *(jobs.cancel(j) for j in rng.sample(queued, min(3, len(queued))))
            )
        elif step == "pass":
            await loop.run_once()
        elif step == "requeue" and holding:
            job = ctx.store.get_job(victim := rng.choice(holding), with_replicas=False)
            assert await ctx.request_requeue(victim, job.attempt, "preempted")
            await ctx.write_phases(
                ctx.store.requeue_now, victim, job.attempt, "again", ctx.clock()
            )
        elif step == "end" and holding:
            await ctx.set_phase(rng.choice(holding), Phase.SUCCEEDED, "done")
        await _agrees(ctx)
