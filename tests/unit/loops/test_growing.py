"""An elastic job through the loops: admitted on the 2 of its 2-4 systems that are free, it
grows once the other two are idle and no job waits: the scheduler asks it for a checkpoint
(reason Growing), the reconciler requeues it, and the next pass admits it on 4. Not before it
ran its attempt `min_run_seconds`, nor while a job waits. Real SQLite store, recording backend,
injected clock."""

from __future__ import annotations

import pytest

from appliance.domain.inventory import NodeState, default_pool
from appliance.domain.job import Progress
from appliance.domain.phases import Phase
from appliance.domain.plan import plan_replicas
from appliance.domain.spec import validate_spec
from appliance.loops.growing import GROW_EVERY
from appliance.loops.reconciling import Reconciler
from appliance.loops.scheduling import SchedulerLoop
from appliance.services.context import Context
from appliance.services.replicas import ReplicaService
from appliance.store.jobs import NewJob
from tests.unit.harness import NOW, PARAMS, Clock, create, new_jobs
from tests.unit.loops.test_preempting import _run_all
from tests.unit.loops.test_reconciling import RecordingBackend

ELASTIC = "wsjob-elastic000000"
LATER = ["cs2-03", "cs2-04"]


@pytest.fixture
async def running_on_two(ctx: Context) -> Reconciler:
    """ELASTIC (2-4 systems, a model dir) RUNNING on cs2-01/02, the other two in maintenance,
    with a checkpoint at step 10."""
    spec = validate_spec(
        params_yaml=PARAMS, num_csx=4, num_steps=100, num_csx_min=2, model_dir="/models/e"
    )
    create(ctx, [NewJob(ELASTIC, "alice", spec, plan_replicas(spec, default_pool()))], NOW)
    ctx.store.set_node_state(LATER, NodeState.MAINTENANCE)
    assert await SchedulerLoop(ctx).run_once() == 1
    assert len(ctx.store.get_job(ELASTIC).systems) == 2
    reconciler = Reconciler(ctx, RecordingBackend(), ReplicaService(ctx))
    await _run_all(ctx, reconciler)
    progress = Progress(step=12, num_steps=100, checkpoint_step=10)
    await ReplicaService(ctx).report_progress(ELASTIC, 1, progress)
    assert ctx.store.get_job(ELASTIC).phase is Phase.RUNNING
    return reconciler


async def test_it_grows_at_a_checkpoint_when_systems_are_idle_and_no_one_waits(
    ctx: Context, running_on_two: Reconciler, clock: Clock
) -> None:
    scheduler, service = SchedulerLoop(ctx), ReplicaService(ctx)
    ctx.store.set_node_state(LATER, NodeState.OK)
    clock.now = NOW + 30  # its attempt ran 30 s: protected, as a preempted job is
    await scheduler.run_once()
    assert not ctx.store.running_jobs(0)[0].stopping
    clock.now = NOW + 61 + GROW_EVERY
    await scheduler.run_once()
    asked = await service.directive(ELASTIC, 1)
    assert asked.checkpoint_now
    assert ctx.store.events(ELASTIC)[-1].reason_code == "Growing"

    done = Progress(step=13, num_steps=100, checkpoint_step=13)
    await service.report_progress(ELASTIC, 1, done, checkpointed=True)
    await running_on_two.sweep(timed=False)
    await running_on_two.drain(10)
    assert ctx.store.get_job(ELASTIC).phase is Phase.QUEUED
    assert await scheduler.run_once() == 1
    grown = ctx.store.get_job(ELASTIC)
    assert (grown.phase, len(grown.systems), grown.attempt) == (Phase.SCHEDULED, 4, 2)


async def test_it_does_not_grow_while_a_job_waits_for_the_systems(
    ctx: Context, running_on_two: Reconciler, clock: Clock
) -> None:
    create(ctx, new_jobs(["wsjob-waiting000000"], num_csx=4), NOW + 1)  # never fits beside
    ctx.store.set_node_state(LATER, NodeState.OK)
    clock.now = NOW + 61 + GROW_EVERY
    assert await SchedulerLoop(ctx).run_once() == 0
    assert not ctx.store.running_jobs(0)[0].stopping
