"""Preemption through the loops: the scheduler asks the lower-priority victim to stop, its chief
is told to checkpoint now, the reconciler requeues it once the checkpoint is reported (or the
grace period ran out), and the head then runs. Over a real SQLite store and the recording
backend; the clock is injected, so nothing sleeps."""

from __future__ import annotations

import dataclasses

import pytest

from appliance.backends.base import ReplicaEvent, ReplicaEventKind
from appliance.config import PreemptionSettings
from appliance.domain.inventory import NodeState
from appliance.domain.job import Progress
from appliance.domain.phases import Phase
from appliance.domain.spec import Priority
from appliance.loops.reconciling import Reconciler
from appliance.loops.scheduling import SchedulerLoop
from appliance.services.context import Context
from appliance.services.nodes import NodeService
from appliance.services.replicas import ReplicaService
from tests.unit.harness import NOW, Clock, create, new_jobs, shown
from tests.unit.loops.test_reconciling import RecordingBackend

VICTIM = "wsjob-victim0000000"
URGENT = "wsjob-urgent0000000"


def _with_model_dir(ctx: Context, ids: list[str], priority: Priority, num_csx: int) -> None:
    jobs = new_jobs(ids, priority, num_csx)
    spec = dataclasses.replace(jobs[0].spec, model_dir="/models/x", num_steps=100)
    create(ctx, [dataclasses.replace(j, spec=spec) for j in jobs], NOW)


async def _run_all(ctx: Context, reconciler: Reconciler) -> None:
    """Launch what is scheduled and register every replica of every holding job."""
    await reconciler.sweep(timed=False)
    service = ReplicaService(ctx)
    for job in ctx.store.jobs_in([Phase.INITIALIZING]):
        for replica in ctx.store.replicas(job.id):
            await service.register(job.id, job.attempt, replica.name, "127.0.0.1:2", 42)


@pytest.fixture
def backend() -> RecordingBackend:
    return RecordingBackend()


@pytest.fixture
async def preempting(ctx: Context, backend: RecordingBackend) -> Reconciler:
    """VICTIM (P3, all 4 systems, with a model dir) RUNNING at step 70 with a checkpoint at
    50; URGENT (P1, 2 systems) submitted."""
    _with_model_dir(ctx, [VICTIM], Priority.P3, 4)
    assert await SchedulerLoop(ctx).run_once() == 1
    reconciler = Reconciler(ctx, backend, ReplicaService(ctx))
    await _run_all(ctx, reconciler)
    progress = Progress(step=70, num_steps=100, checkpoint_step=50)
    await ReplicaService(ctx).report_progress(VICTIM, 1, progress)
    create(ctx, new_jobs([URGENT], Priority.P1, 2), NOW + 1)
    return reconciler


async def test_the_victim_checkpoints_now_and_is_requeued_then_the_head_runs(
    ctx: Context, preempting: Reconciler, backend: RecordingBackend
) -> None:
    scheduler, service = SchedulerLoop(ctx), ReplicaService(ctx)
    assert await scheduler.run_once() == 0
    assert shown(ctx, URGENT).pending_reason == (
        f"waiting to preempt {VICTIM} (P3): they checkpoint and stop"
    )
    asked = await service.directive(VICTIM, 1)
    assert (asked.keep_running, asked.checkpoint_now) == (True, True)
    assert ctx.store.events(VICTIM)[-1].reason == (
        f"preempted by {URGENT} (P1); asked for a checkpoint within 30 s"
    )
    await preempting.sweep(timed=False)  # nothing to do until the checkpoint is reported
    assert ctx.store.get_job(VICTIM).phase is Phase.RUNNING
    assert await scheduler.run_once() == 0  # waits for the victim, picks no other
    assert [j.id for j in ctx.store.jobs_in([Phase.QUEUED])] == [URGENT]
    assert len(ctx.store.requeue_requests()) == 1

    checkpointed = Progress(step=72, num_steps=100, checkpoint_step=72)
    told = await service.report_progress(VICTIM, 1, checkpointed, checkpointed=True)
    assert not told.keep_running  # the chief stops there
    await preempting.sweep(timed=False)
    await preempting.drain(10)
    victim = ctx.store.get_job(VICTIM)
    assert (victim.phase, victim.restarts, backend.torn_down) == (Phase.QUEUED, 1, [VICTIM])
    assert victim.pending_reason == (
        f"preempted by {URGENT} (P1); checkpointed at step 72; requeued at position 2"
    )
    assert await scheduler.run_once() == 1
    assert ctx.store.get_job(URGENT).phase is Phase.SCHEDULED
    assert ctx.store.get_job(VICTIM).phase is Phase.QUEUED  # behind, in its place


async def test_without_the_checkpoint_in_time_the_newest_one_is_used(
    ctx: Context, preempting: Reconciler, clock: Clock
) -> None:
    await SchedulerLoop(ctx).run_once()
    clock.now += PreemptionSettings.grace_seconds - 1
    await preempting.sweep(timed=False)
    assert ctx.store.get_job(VICTIM).phase is Phase.RUNNING
    clock.now += 2
    await preempting.sweep(timed=False)
    await preempting.drain(10)
    assert shown(ctx, VICTIM).pending_reason == (
        f"preempted by {URGENT} (P1); no checkpoint within 30 s: resumes from step 50; "
        "requeued at position 2"
    )


async def test_a_coordinator_restarted_midway_finishes_the_requeue(
    ctx: Context, preempting: Reconciler, backend: RecordingBackend
) -> None:
    """Killed after the request (the store holds it) and before the teardown: the next
    coordinator adopts the job, does not judge its replicas' exits, and requeues it once."""
    await SchedulerLoop(ctx).run_once()
    await ReplicaService(ctx).report_progress(
        VICTIM, 1, Progress(step=71, checkpoint_step=71), checkpointed=True
    )
    backend.live = {VICTIM: {r.name for r in ctx.store.replicas(VICTIM)}}
    backend.codes = {VICTIM: {"chief-0": 0}}  # the chief stopped as told
    again = Reconciler(ctx, backend, ReplicaService(ctx))
    await again.recover()
    await again.sweep(timed=False)
    await again.drain(10)
    victim = ctx.store.get_job(VICTIM)
    assert (victim.phase, victim.attempt, victim.restarts) == (Phase.QUEUED, 1, 1)
    assert backend.torn_down == [VICTIM]
    assert ctx.store.pool_usage() and not ctx.store.node_holders()


async def test_policy_never_and_equal_priority_preempt_nothing(
    ctx: Context, preempting: Reconciler
) -> None:
    never = PreemptionSettings(policy="never")
    await SchedulerLoop(ctx, preemption=never).run_once()
    assert not ctx.store.requeue_requests()
    ctx.store.set_priority(URGENT, Priority.P3, NOW)
    ctx.backlog.mark(URGENT)  # as the priority door does
    await SchedulerLoop(ctx).run_once()
    assert not ctx.store.requeue_requests()
    assert "waiting to preempt" not in shown(ctx, URGENT).pending_reason


async def test_a_job_that_finished_as_it_was_asked_to_stop_succeeds(
    ctx: Context, preempting: Reconciler
) -> None:
    """Its last report came before the request; its chief's exit 0 is the job's end, not a
    stop to run again from."""
    service = ReplicaService(ctx)
    await service.report_progress(VICTIM, 1, Progress(step=100, num_steps=100))
    await SchedulerLoop(ctx).run_once()
    assert ctx.store.requeue_requests()
    done = ReplicaEvent(VICTIM, "chief-0", ReplicaEventKind.EXITED, exit_code=0, attempt=1)
    await preempting.on_replica_event(done)
    assert ctx.store.get_job(VICTIM).phase is Phase.SUCCEEDED
    assert not ctx.store.requeue_requests()


async def test_a_stop_of_a_job_not_yet_running_needs_no_checkpoint_and_is_not_relaunched(
    ctx: Context, backend: RecordingBackend
) -> None:
    _with_model_dir(ctx, [VICTIM], Priority.P3, 4)
    assert await SchedulerLoop(ctx).run_once() == 1  # SCHEDULED, not launched yet
    create(ctx, new_jobs([URGENT], Priority.P1, 2), NOW + 1)
    await SchedulerLoop(ctx).run_once()
    assert shown(ctx, URGENT).pending_reason == (f"waiting to preempt {VICTIM} (P3): they stop")
    reconciler = Reconciler(ctx, backend, ReplicaService(ctx))
    await reconciler.sweep(timed=False)
    await reconciler.drain(10)
    assert backend.launched == []  # being requeued: never launched
    assert ctx.store.get_job(VICTIM).phase is Phase.QUEUED


async def test_victims_are_chosen_only_on_a_pass_that_admitted_nothing(
    ctx: Context, backend: RecordingBackend
) -> None:
    """On the pass that admits A the pool it read is stale; on the next, the head H (3
    systems) would not fit even with both P3 jobs stopped, as A holds 2: nothing is
    preempted."""
    create(ctx, new_jobs(["wsjob-v0000000000000", "wsjob-w0000000000000"],
                                   Priority.P3, 1), NOW)  # fmt: skip
    assert await SchedulerLoop(ctx).run_once() == 2
    create(ctx, new_jobs(["wsjob-a0000000000000"], Priority.P1, 2), NOW + 1)
    create(ctx, new_jobs(["wsjob-h0000000000000"], Priority.P1, 3), NOW + 2)
    scheduler = SchedulerLoop(ctx)
    assert await scheduler.run_once() == 1
    assert await scheduler.run_once() == 0
    assert not ctx.store.requeue_requests()


async def test_jobs_left_on_a_node_in_error_are_taken_away_by_the_sweep(
    ctx: Context, preempting: Reconciler
) -> None:
    """The coordinator stopped after the node's change and before its take-away: the next
    timed sweep finds the job still on it and takes it away (here: failed, no restart)."""
    assert ctx.store.change_node_state("cs2-02", NodeState.ERROR, "fan", "root", NOW + 2)
    await preempting.sweep(timed=True)
    victim = ctx.store.get_job(VICTIM)
    assert (victim.phase, victim.reason) == (Phase.FAILED, "system cs2-02 went to error: fan")


async def test_a_preemption_is_withdrawn_when_its_preemptor_stops_waiting(
    ctx: Context, preempting: Reconciler
) -> None:
    await SchedulerLoop(ctx).run_once()
    assert (await ReplicaService(ctx).directive(VICTIM, 1)).checkpoint_now
    await ctx.set_phase(URGENT, Phase.CANCELLED, "changed my mind")
    await preempting.sweep(timed=False)
    await preempting.drain(10)
    victim = ctx.store.get_job(VICTIM)
    assert (victim.phase, victim.restarts) == (Phase.RUNNING, 0)
    assert ctx.store.events(VICTIM)[-1].reason == (
        f"preemption by {URGENT} withdrawn: {URGENT} is cancelled"
    )
    told = await ReplicaService(ctx).directive(VICTIM, 1)
    assert (told.keep_running, told.checkpoint_now) == (True, False)


async def test_a_preemption_is_withdrawn_when_the_victim_is_raised(
    ctx: Context, preempting: Reconciler
) -> None:
    await SchedulerLoop(ctx).run_once()
    ctx.store.set_priority(VICTIM, Priority.P1, NOW)
    await preempting.sweep(timed=False)
    assert not ctx.store.requeue_requests()
    assert ctx.store.events(VICTIM)[-1].reason.endswith("no longer has the higher priority")


async def test_a_replica_dying_before_the_checkpoint_requeues_at_once(
    ctx: Context, preempting: Reconciler
) -> None:
    await SchedulerLoop(ctx).run_once()
    killed = ReplicaEvent(VICTIM, "cs2-0", ReplicaEventKind.EXITED, exit_code=137, attempt=1)
    await preempting.on_replica_event(killed)
    await preempting.sweep(timed=False)  # no need to wait out the grace period
    await preempting.drain(10)
    assert shown(ctx, VICTIM).pending_reason == (
        f"preempted by {URGENT} (P1); cs2-0 exited (137) before the checkpoint; resumes from "
        "step 50; requeued at position 2"
    )


async def test_a_node_in_error_under_a_victim_cuts_its_checkpoint_wait_short(
    ctx: Context, preempting: Reconciler
) -> None:
    """It was leaving anyway: requeued at once from its newest checkpoint, naming the node,
    though its policy allows no restart (max_restarts 0): a preemption is not a failure."""
    await SchedulerLoop(ctx).run_once()
    assert (await ReplicaService(ctx).directive(VICTIM, 1)).checkpoint_now
    await NodeService(ctx).set_state("cs2-04", NodeState.ERROR, "fan", None)
    await preempting.sweep(timed=False)  # not at the end of the grace period: now
    await preempting.drain(10)
    victim = ctx.store.get_job(VICTIM)
    assert (victim.phase, victim.retries) == (Phase.QUEUED, 0)
    assert victim.pending_reason == (
        f"preempted by {URGENT} (P1); system cs2-04 went to error: fan: no checkpoint "
        "awaited; resumes from step 50; requeued at position 2"
    )


async def test_the_head_says_which_jobs_it_may_not_preempt(
    ctx: Context, backend: RecordingBackend
) -> None:
    jobs = new_jobs([VICTIM], Priority.P3, 4)
    spec = dataclasses.replace(jobs[0].spec, preemptible=False)
    create(ctx, [dataclasses.replace(jobs[0], spec=spec)], NOW)
    assert await SchedulerLoop(ctx).run_once() == 1
    create(ctx, new_jobs([URGENT], Priority.P1, 2), NOW + 1)
    await SchedulerLoop(ctx).run_once()
    assert not ctx.store.requeue_requests()
    assert shown(ctx, URGENT).pending_reason == (
        f"needs 2 systems, 0 free; not preempting {VICTIM} (never preempted)"
    )
