"""Holds and suspensions (#37) through the use cases and the scheduler loop, over a real SQLite
store: a held job is stepped over (never a head), keeps its place and takes it again when
released; who may hold and release; a suspension asks for a checkpoint and a requeue, held.
The rules alone: tests/unit/domain/test_hold_rules.py."""

from __future__ import annotations

import asyncio

import pytest

from appliance.domain.auth import Principal
from appliance.domain.errors import Conflict, InvalidSpec, NotFound, PermissionDenied
from appliance.domain.holds import HoldKind
from appliance.domain.phases import Phase
from appliance.domain.reasons import ReasonCode
from appliance.loops.scheduling import SchedulerLoop
from appliance.services.arrays import ArrayService
from appliance.services.context import Context
from appliance.services.holds import HoldService
from tests.unit.harness import NOW, create, new_jobs, shown

# Three jobs of alice's, three systems each, on a pool of four: one runs at a time.
IDS = [f"wsjob-holdsloop000{i}" for i in range(3)]
ALICE = Principal("alice")
BOB = Principal("bob")
ROOT = Principal("root", admin=True)


@pytest.fixture
def holds(ctx: Context) -> HoldService:
    create(ctx, new_jobs(IDS, num_csx=3), NOW)
    return HoldService(ctx, ArrayService(ctx, asyncio.to_thread), checkpoint_grace=30.0)


async def test_a_held_job_is_stepped_over_and_takes_its_place_again_when_released(
    ctx: Context, holds: HoldService
) -> None:
    loop = SchedulerLoop(ctx)
    held = await holds.hold(IDS[0], by=ALICE)
    assert held.changed and held.job.hold is not None and held.job.hold.by == "alice"
    assert await loop.run_once() == 1
    assert ctx.store.get_job(IDS[1]).phase is Phase.SCHEDULED  # the held one is no head
    first = shown(ctx, IDS[0])
    assert first.phase is Phase.QUEUED and first.queue_position == 1  # its place kept
    assert first.pending_reason_code == ReasonCode.HELD_USER.value
    assert first.pending_reason.startswith("held by alice")
    assert shown(ctx, IDS[2]).pending_reason_code != ReasonCode.HELD_USER.value

    released = await holds.release(IDS[0], by=ALICE)
    assert released.changed and released.job.hold is None
    await ctx.set_phase(IDS[1], Phase.CANCELLED, "done with it")
    assert await loop.run_once() == 1
    assert ctx.store.get_job(IDS[0]).phase is Phase.SCHEDULED  # ahead of the one behind it
    assert ctx.store.get_job(IDS[2]).phase is Phase.QUEUED


async def test_every_hold_and_release_bumps_the_version_and_is_announced(
    ctx: Context, holds: HoldService
) -> None:
    before = ctx.store.job_version(IDS[0])[0]
    with ctx.bus.every_job() as changed:
        await holds.hold(IDS[0], by=ALICE)
        assert IDS[0] in changed.take()
        again = await holds.hold(IDS[0], by=ALICE)  # held already: nothing to write
        assert not again.changed and not changed.take()
        await holds.release(IDS[0], by=ALICE)
        assert IDS[0] in changed.take()
    assert ctx.store.job_version(IDS[0])[0] == before + 2
    assert ctx.bus.schedule_wanted.is_set()
    nothing = await holds.release(IDS[0], by=ALICE)
    assert not nothing.changed and "not held" in nothing.message


async def test_only_the_owner_and_admins_hold_and_only_admins_release_an_admins_hold(
    ctx: Context, holds: HoldService
) -> None:
    version = ctx.store.job_version(IDS[0])[0]
    with pytest.raises(PermissionDenied, match="bob may not hold a job of alice"):
        await holds.hold(IDS[0], by=BOB)
    assert ctx.store.job_version(IDS[0])[0] == version and ctx.store.get_job(IDS[0]).hold is None

    await holds.hold(IDS[0], by=ALICE)
    upgraded = await holds.hold(IDS[0], by=ROOT)  # an admin's hold replaces the user's
    assert upgraded.changed and upgraded.job.hold is not None
    assert upgraded.job.hold.kind is HoldKind.ADMIN
    assert (await holds.hold(IDS[0], by=ALICE)).changed is False  # stays the admin's

    version = ctx.store.job_version(IDS[0])[0]
    with pytest.raises(PermissionDenied, match="only an admin may release it"):
        await holds.release(IDS[0], by=ALICE)
    job = ctx.store.get_job(IDS[0])
    assert job.hold is not None and ctx.store.job_version(IDS[0])[0] == version
    await SchedulerLoop(ctx).run_once()
    assert shown(ctx, IDS[0]).pending_reason_code == ReasonCode.HELD_ADMIN.value
    assert (await holds.release(IDS[0], by=ROOT)).changed


async def test_holding_a_job_that_is_not_queued_or_not_there_is_refused(
    ctx: Context, holds: HoldService
) -> None:
    await SchedulerLoop(ctx).run_once()  # IDS[0] is scheduled
    with pytest.raises(Conflict, match=f"job {IDS[0]} is SCHEDULED; only a queued job"):
        await holds.hold(IDS[0], by=ALICE)
    with pytest.raises(Conflict, match="is SCHEDULED; only a running job can be suspended"):
        await holds.suspend(IDS[0], by=ALICE)
    with pytest.raises(NotFound, match="wsjob-nosuchjob00000 not found"):
        await holds.hold("wsjob-nosuchjob00000", by=ALICE)
    with pytest.raises(InvalidSpec, match="is not a job id"):
        await holds.release("../etc", by=ALICE)
    assert ctx.store.get_job(IDS[0]).hold is None


async def test_a_suspension_asks_for_a_checkpoint_and_a_requeue_and_the_job_waits_held(
    ctx: Context, holds: HoldService
) -> None:
    await SchedulerLoop(ctx).run_once()
    await ctx.set_phase(IDS[0], Phase.INITIALIZING, "started")
    await ctx.set_phase(IDS[0], Phase.RUNNING, "ready")
    with pytest.raises(PermissionDenied):
        await holds.suspend(IDS[0], by=BOB)
    await holds.hold(IDS[1], by=ALICE)
    with pytest.raises(Conflict, match="is held, not suspended; release it instead"):
        await holds.release(IDS[1], by=ALICE, resume=True)
    await holds.release(IDS[1], by=ALICE)

    outcome = await holds.suspend(IDS[0], by=ROOT)
    assert outcome.changed and outcome.job.hold is not None and outcome.job.hold.suspended
    state = ctx.store.stop_state(IDS[0])
    assert state is not None and state.stopping  # the reconciler tears it down, then requeues
    assert not (await holds.suspend(IDS[0], by=ROOT)).changed  # already suspended
    await ctx.write_phases(
        ctx.store.requeue_now, IDS[0], 1, outcome.job.hold.reason, ctx.clock()
    )  # as the requeuer does, once the checkpoint is written
    await SchedulerLoop(ctx).run_once()
    job = shown(ctx, IDS[0])
    assert job.phase is Phase.QUEUED and job.pending_reason_code == ReasonCode.SUSPENDED.value
    assert ctx.store.get_job(IDS[2]).phase is Phase.QUEUED  # IDS[1] got the systems
    with pytest.raises(PermissionDenied, match="only an admin may resume it"):
        await holds.release(IDS[0], by=ALICE, resume=True)
    resumed = await holds.release(IDS[0], by=ROOT, resume=True)
    assert resumed.changed and resumed.job.hold is None


async def test_the_start_estimates_do_not_wait_for_a_held_job(
    ctx: Context, holds: HoldService
) -> None:
    ctx.estimates.default_step_seconds = 10.0
    await holds.hold(IDS[0], by=ALICE)
    starts = await ctx.estimates.of(IDS)
    assert IDS[0] not in starts
    assert starts[IDS[1]] == ctx.clock()  # the held job ahead of it reserves nothing
