"""The one front door for phase changes (services.context.Context): every write through it is
announced to the job's watchers and wakes the loops that care, whichever of its three ways
wrote it."""

from __future__ import annotations

import pytest

from appliance.domain.phases import Phase
from appliance.scheduler.admission import admit
from appliance.services.context import Context
from appliance.store.jobs import PhaseMove
from tests.unit.harness import NOW, new_jobs

IDS = [f"wsjob-frontdoor0000{i}" for i in range(3)]


@pytest.fixture(autouse=True)
def _three_queued_jobs(ctx: Context) -> None:
    ctx.store.create_jobs(new_jobs(IDS), NOW)


async def test_schedule_set_phase_and_batches_are_all_announced(ctx: Context) -> None:
    first, second, third = (f"wsjob-frontdoor0000{i}" for i in range(3))
    with ctx.bus.subscribe(first) as events_1, ctx.bus.subscribe(third) as events_3:
        [decision, *_] = admit(ctx.store.queued_jobs(), ctx.store.pool_usage()).admitted
        assert decision.job_id == first
        scheduled = await ctx.schedule(first, decision.placements)
        assert scheduled.applied and ctx.bus.reconcile_wanted.is_set()
        assert events_1.get_nowait().to_phase is Phase.SCHEDULED

        ctx.bus.schedule_wanted.clear()
        await ctx.set_phase(first, Phase.FAILED, "a replica failed", expected=Phase.SCHEDULED)
        assert events_1.get_nowait().to_phase is Phase.FAILED
        assert ctx.bus.schedule_wanted.is_set()  # its systems came back

        moves = [PhaseMove(second, Phase.CANCELLED, "batch", Phase.QUEUED),
                 PhaseMove(third, Phase.CANCELLED, "batch", Phase.QUEUED)]  # fmt: skip
        outcomes = await ctx.write_phases(ctx.store.set_phases, moves, NOW + 2)
        assert [o.applied for o in outcomes] == [True, True]
        assert events_3.get_nowait().reason == "batch"
        assert events_1.empty() and events_3.empty()


async def test_a_change_that_did_not_apply_announces_nothing(ctx: Context) -> None:
    job = "wsjob-frontdoor00000"
    with ctx.bus.subscribe(job) as events:
        lost = await ctx.set_phase(job, Phase.CANCELLED, "late", expected=Phase.RUNNING)
        assert not lost.applied
        assert events.empty() and not ctx.bus.reconcile_wanted.is_set()
