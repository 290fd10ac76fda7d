"""The one front door for phase changes (services.context.Context): every write through it is
announced to the job's watchers and wakes the loops that care, whichever of its three ways
wrote it. Over a real SQLite store; the bus is our own seam and is read directly."""

from __future__ import annotations

from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.domain.inventory import default_pool
from appliance.domain.phases import Phase
from appliance.domain.plan import plan_replicas
from appliance.domain.spec import validate_spec
from appliance.scheduler.admission import admit
from appliance.services.bus import JobBus
from appliance.services.context import Context
from appliance.store.engine import make_engine, migrate
from appliance.store.jobs import JobStore, NewJob, PhaseMove

PARAMS = "model: {name: fc_mnist, hidden_sizes: [4]}\n"
NOW = 1_700_000_000.0


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[Context]:
    engine = make_engine(f"sqlite:///{tmp_path / 'jobs.db'}")
    migrate(engine)
    store = JobStore(engine)
    store.sync_pool(default_pool())
    spec = validate_spec(params_yaml=PARAMS, num_csx=1, num_steps=5)
    plan = plan_replicas(spec, default_pool())
    store.create_jobs(
        [NewJob(f"wsjob-frontdoor0000{i}", "alice", spec, plan) for i in range(3)], NOW
    )
    writer = ThreadPoolExecutor(1, thread_name_prefix="test-store")
    settings = Settings(data_dir=tmp_path / "data")
    try:
        yield Context(settings, store, JobBus(), writer, clock=lambda: NOW + 1)
    finally:
        writer.shutdown(wait=True)
        engine.dispose()


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
