"""The scheduler loop applies what `admit` decides: admitted jobs are scheduled through the
front door, the rest get their pending reasons, and a pass that changes nothing writes nothing.
Over a real SQLite store."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from pathlib import Path

import pytest

from appliance.domain.phases import Phase
from appliance.loops.scheduling import SchedulerLoop
from appliance.services.context import Context
from tests.unit.harness import NOW, create, new_jobs, shown

# Three jobs of three systems each, on a pool of four: one runs, two wait.
IDS = [f"wsjob-schedloop0000{i}" for i in range(3)]


@pytest.fixture
def loop(ctx: Context) -> SchedulerLoop:
    create(ctx, new_jobs(IDS, num_csx=3), NOW)
    return SchedulerLoop(ctx)


async def test_a_pass_schedules_what_fits_and_says_why_the_rest_waits(
    ctx: Context, loop: SchedulerLoop
) -> None:
    with ctx.bus.subscribe(IDS[0]) as events:
        assert await loop.run_once() == 1
        assert events.get_nowait().to_phase is Phase.SCHEDULED  # announced
    assert ctx.bus.reconcile_wanted.is_set()  # the reconciler launches it
    first, *waiting = (shown(ctx, job_id) for job_id in IDS)
    assert first.phase is Phase.SCHEDULED and len(first.systems) == 3
    assert [job.phase for job in waiting] == [Phase.QUEUED, Phase.QUEUED]
    assert waiting[0].pending_reason == "needs 3 systems, 1 free"
    assert IDS[1] in waiting[1].pending_reason  # behind the job ahead of it


async def test_a_pass_that_changes_nothing_writes_nothing(
    ctx: Context, loop: SchedulerLoop
) -> None:
    await loop.run_once()
    versions = [ctx.store.job_version(job_id) for job_id in IDS]
    assert await loop.run_once() == 0
    assert [ctx.store.job_version(job_id) for job_id in IDS] == versions


async def test_freed_systems_admit_the_next_job_and_an_empty_queue_is_a_no_op(
    ctx: Context, loop: SchedulerLoop
) -> None:
    await loop.run_once()
    await ctx.set_phase(IDS[0], Phase.CANCELLED, "done with it")
    assert await loop.run_once() == 1
    assert ctx.store.get_job(IDS[1]).phase is Phase.SCHEDULED
    await ctx.set_phase(IDS[2], Phase.CANCELLED, "not needed")
    assert await loop.run_once() == 0  # nothing queued
    assert ctx.store.get_job(IDS[1]).phase is Phase.SCHEDULED


async def test_a_trace_that_cannot_be_written_leaves_the_scheduler_running(
    ctx: Context, loop: SchedulerLoop, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """APPLIANCE_SCHEDULER_TRACE is a diagnostic: a path it cannot open is said in the log and
    the passes go on (before, the scheduler's task died with the OSError)."""
    loop.settings = dataclasses.replace(
        loop.settings, trace=tmp_path / "no-such-dir" / "passes.jsonl"
    )
    task = asyncio.get_running_loop().create_task(loop.run())
    try:
        with ctx.bus.subscribe(IDS[0]) as events:
            event = await asyncio.wait_for(events.get(), 10)  # the first pass schedules it
        assert event.to_phase is Phase.SCHEDULED
        assert "scheduler trace" in caplog.text and "passes go on untraced" in caplog.text
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
