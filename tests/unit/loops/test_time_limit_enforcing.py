"""Time limits through the loops: a running job at its limit is asked for a checkpoint, then
torn down and ended TIMEOUT (ReasonCode.TimeLimit); only time RUNNING counts, summed over its
attempts. Over a real SQLite store and the recording backend, on the injected clock."""

from __future__ import annotations

import dataclasses

import pytest

from appliance.config import TimeLimitSettings
from appliance.domain.job import Progress
from appliance.domain.phases import Phase
from appliance.domain.reasons import ReasonCode, said
from appliance.domain.spec import Priority, with_time_limit
from appliance.loops.reconciling import Reconciler
from appliance.loops.scheduling import SchedulerLoop
from appliance.services.context import Context
from appliance.services.replicas import ReplicaService
from tests.unit.harness import NOW, Clock, create, new_jobs
from tests.unit.loops.test_preempting import _run_all
from tests.unit.loops.test_reconciling import RecordingBackend

JOB = "wsjob-timelimit00000"
LIMIT = 60


def _submit(ctx: Context, *, model_dir: str = "/models/x") -> None:
    (job,) = new_jobs([JOB], Priority.P2, 2)
    spec = dataclasses.replace(job.spec, model_dir=model_dir, num_steps=1000)
    create(ctx, [dataclasses.replace(job, spec=with_time_limit(spec, LIMIT))], NOW)


async def _start(ctx: Context, reconciler: Reconciler) -> None:
    assert await SchedulerLoop(ctx).run_once() == 1
    await _run_all(ctx, reconciler)
    assert ctx.store.get_job(JOB).phase is Phase.RUNNING


@pytest.fixture
def backend() -> RecordingBackend:
    return RecordingBackend()


@pytest.fixture
def reconciler(ctx: Context, backend: RecordingBackend) -> Reconciler:
    return Reconciler(ctx, backend, ReplicaService(ctx), time_limits=TimeLimitSettings(20.0))


async def test_at_its_limit_a_job_checkpoints_then_ends_timeout(
    ctx: Context, clock: Clock, reconciler: Reconciler, backend: RecordingBackend
) -> None:
    _submit(ctx)
    clock.now += 500  # time queued does not count
    await _start(ctx, reconciler)
    clock.now += LIMIT - 1
    await reconciler.sweep()
    assert not ctx.store.requeue_requests()
    clock.now += 1
    await reconciler.sweep()
    (request,) = ctx.store.requeue_requests()
    assert request.reason_code == ReasonCode.TIME_LIMIT.value
    assert ctx.store.events(JOB)[-1].reason.endswith("asked for a checkpoint within 20 s")
    requeues = ctx.metrics.registry.get_sample_value(
        "appliance_job_requeues_total", {"cause": "restart"}
    )
    assert not requeues  # it ends TIMEOUT: not a requeue
    asked = await ReplicaService(ctx).directive(JOB, 1)
    assert asked.checkpoint_now
    done = Progress(step=300, num_steps=1000, checkpoint_step=300)
    await ReplicaService(ctx).report_progress(JOB, 1, done, checkpointed=True)
    await reconciler.sweep(timed=False)
    await reconciler.drain(10)
    job = ctx.store.get_job(JOB)
    assert (job.phase, job.reason_code, backend.torn_down) == (
        Phase.TIMEOUT, ReasonCode.TIME_LIMIT.value, [JOB]
    )  # fmt: skip
    assert job.reason == said(ReasonCode.TIME_LIMIT, limit="00:01:00", checkpointed=300).message
    assert ctx.store.pool_usage() and not ctx.store.node_holders()  # its systems are free


async def test_without_the_checkpoint_in_the_grace_it_ends_anyway(
    ctx: Context, clock: Clock, reconciler: Reconciler
) -> None:
    _submit(ctx)
    await _start(ctx, reconciler)
    await ReplicaService(ctx).report_progress(JOB, 1, Progress(step=90, checkpoint_step=50))
    clock.now += LIMIT
    await reconciler.sweep()
    clock.now += 19
    await reconciler.sweep()
    assert ctx.store.get_job(JOB).phase is Phase.RUNNING
    clock.now += 1
    await reconciler.sweep()
    await reconciler.drain(10)
    job = ctx.store.get_job(JOB)
    assert job.phase is Phase.TIMEOUT
    assert "no checkpoint within 20 s; the newest is at step 50" in job.reason


async def test_a_job_without_a_model_dir_ends_at_once(
    ctx: Context, clock: Clock, reconciler: Reconciler
) -> None:
    _submit(ctx, model_dir="")
    await _start(ctx, reconciler)
    clock.now += LIMIT
    await reconciler.sweep()
    await reconciler.sweep(timed=False)
    await reconciler.drain(10)
    assert ctx.store.get_job(JOB).phase is Phase.TIMEOUT


async def test_only_running_time_counts_summed_over_attempts(
    ctx: Context, clock: Clock, reconciler: Reconciler
) -> None:
    """40 s in a first attempt, requeued (a preemption, say), 1000 s in the queue, then the
    second attempt reaches the limit after 20 s more."""
    _submit(ctx)
    await _start(ctx, reconciler)
    clock.now += 40
    restart = said(ReasonCode.RESTARTING, failure="x", resume="the start", restart=1, limit=1)
    assert await ctx.request_requeue(JOB, 1, restart)
    await reconciler.sweep(timed=False)
    await reconciler.drain(10)
    assert ctx.store.get_job(JOB).phase is Phase.QUEUED
    clock.now += 1000
    await _start(ctx, reconciler)
    clock.now += 19
    await reconciler.sweep()
    assert not ctx.store.requeue_requests()
    clock.now += 1
    await reconciler.sweep()
    (request,) = ctx.store.requeue_requests()
    assert request.reason_code == ReasonCode.TIME_LIMIT.value
