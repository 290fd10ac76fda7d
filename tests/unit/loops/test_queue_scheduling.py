"""The scheduler loop over queues, on a real SQLite store and an injected clock: fair share
over a long run, a reclaim of borrowed systems, and dependencies (waiting, then cancelled
when they break, a chain in one pass)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from appliance.domain.dependencies import Condition, Dependency, DependencyState
from appliance.domain.phases import Phase
from appliance.domain.queues import validate_queue
from appliance.domain.spec import Priority
from appliance.loops.scheduling import SchedulerLoop
from appliance.services.context import Context
from appliance.services.queues import QueueService
from tests.unit.harness import NOW, Clock, create, new_jobs, shown, store_context

MINUTES = 60.0


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[Context]:
    async with store_context(tmp_path) as ctx:
        yield ctx


def _queues(ctx: Context, **weights: float) -> None:
    """Queues of 2 systems each (the default pool has 4) with these weights."""
    for name, weight in weights.items():
        spec = validate_queue(name=name, systems=2, weight=weight)
        ctx.store.put_queue(name, lambda _current, spec=spec: spec, lambda _queues: None)


def _submit(
    ctx: Context,
    job_id: str,
    queue: str,
    num_csx: int,
    at: float,
    depends_on: tuple[Dependency, ...] = (),
    model_dir: str = "",
) -> None:
    [job] = new_jobs([job_id], Priority.P2, num_csx)
    spec = dataclasses.replace(
        job.spec, queue=queue, depends_on=depends_on, model_dir=model_dir, num_steps=100
    )
    create(ctx, [dataclasses.replace(job, spec=spec)], at)


def _run(ctx: Context, job_id: str) -> None:
    for phase in (Phase.INITIALIZING, Phase.RUNNING):
        assert ctx.store.set_phase(job_id, phase, "on", ctx.clock()).applied


def _scheduled(ctx: Context) -> list[str]:
    return sorted(j.id for j in ctx.store.jobs_in([Phase.SCHEDULED]))


async def _serve(ctx: Context, backlog: dict[str, int], rounds: int) -> dict[str, int]:
    """Each queue has `backlog` 4-system jobs (so each borrows the other's quota, and one runs
    at a time); each runs 10 minutes. Returns how many ran per queue, in order."""
    clock = ctx.clock
    assert isinstance(clock, Clock)
    for queue, count in backlog.items():
        for n in range(count):
            _submit(ctx, f"wsjob-{queue}{n:04d}aaaaaaaa", queue, 4, at=NOW + n)
    order: list[str] = []
    scheduler = SchedulerLoop(ctx)
    for _ in range(rounds):
        assert await scheduler.run_once() == 1
        [job_id] = _scheduled(ctx)
        order.append(job_id.removeprefix("wsjob-")[:-12])
        _run(ctx, job_id)
        clock.now += 10 * MINUTES
        assert ctx.store.set_phase(job_id, Phase.SUCCEEDED, "done", clock.now).applied
    ctx.order = order  # type: ignore[attr-defined]
    return {q: sum(1 for o in order if o == q) for q in backlog}


async def test_two_queues_of_equal_weight_with_the_same_backlog_alternate(
    ctx: Context,
) -> None:
    _queues(ctx, nlp=1.0, vision=1.0)
    ran = await _serve(ctx, {"nlp": 12, "vision": 12}, rounds=12)
    assert ctx.order == ["nlp", "vision"] * 6  # type: ignore[attr-defined]
    assert ran == {"nlp": 6, "vision": 6}


async def test_twice_the_weight_gets_twice_the_system_time_over_a_long_run(
    ctx: Context,
) -> None:
    _queues(ctx, nlp=2.0, vision=1.0)
    ran = await _serve(ctx, {"nlp": 100, "vision": 100}, rounds=90)
    # Every job holds 4 systems for 10 minutes: system-time is in proportion to jobs run.
    assert ran["nlp"] / ran["vision"] == pytest.approx(2.0, rel=0.10)
    statuses = {q.spec.name: q for q in await QueueService(ctx).list()}
    assert statuses["nlp"].share == pytest.approx(2 / 3, rel=0.10)


async def test_a_queue_below_its_quota_reclaims_what_another_borrows(ctx: Context) -> None:
    """nlp runs two 2-system jobs, the younger on vision's idle quota; a vision job arrives:
    the borrower is asked for a checkpoint and requeued, and the vision job runs."""
    _queues(ctx, nlp=1.0, vision=1.0)
    scheduler = SchedulerLoop(ctx)
    queues = QueueService(ctx)
    _submit(ctx, "wsjob-nlpfirst0000000", "nlp", 2, at=NOW, model_dir="/models/a")
    _submit(ctx, "wsjob-nlpsecond000000", "nlp", 2, at=NOW + 1, model_dir="/models/b")
    assert await scheduler.run_once() == 2
    for job_id in ("wsjob-nlpfirst0000000", "wsjob-nlpsecond000000"):
        _run(ctx, job_id)
    ctx.clock.now += MINUTES  # type: ignore[attr-defined]
    nlp, vision = [q for q in await queues.list() if q.spec.name in ("nlp", "vision")]
    assert (nlp.used_systems, nlp.borrowed_systems, vision.lent_systems) == (4, 2, 2)

    _submit(ctx, "wsjob-vision00000000", "vision", 2, at=ctx.clock())
    assert await scheduler.run_once() == 0
    [request] = ctx.store.requeue_requests()
    assert (request.job_id, request.preempted_by) == (
        "wsjob-nlpsecond000000",
        "wsjob-vision00000000",
    )
    assert request.checkpoint_by > 0  # it has a model dir: checkpoint first
    # A reclaim does not go by priority (both are P2): it is not withdrawn as moot.
    assert ctx.store.withdraw_moot_preemptions(ctx.clock()) == []
    assert shown(ctx, "wsjob-vision00000000").pending_reason == (
        "waiting to reclaim 2 systems lent to queue nlp (wsjob-nlpsecond000000)"
    )
    assert ctx.store.events("wsjob-nlpsecond000000")[-1].reason.startswith(
        "preempted by wsjob-vision00000000 (P2): queue vision reclaims its quota"
    )
    # The victim checkpoints and is requeued (the reconciler's part): then vision runs.
    assert ctx.store.record_checkpoint_now("wsjob-nlpsecond000000", 1, 40, ctx.clock())[0]
    assert await ctx.write_phases(
        ctx.store.requeue_now, "wsjob-nlpsecond000000", 1, "preempted", ctx.clock()
    )
    assert await scheduler.run_once() == 1
    assert _scheduled(ctx) == ["wsjob-vision00000000"]
    requeued = shown(ctx, "wsjob-nlpsecond000000")
    assert (
        requeued.pending_reason == "queue nlp uses 2 of its 2 systems; cohort has 0 idle to lend"
    )
    nlp, vision = [q for q in await queues.list() if q.spec.name in ("nlp", "vision")]
    assert (nlp.used_systems, nlp.borrowed_systems, nlp.pending) == (2, 0, 1)
    assert (vision.used_systems, vision.lent_systems) == (2, 0)


async def test_a_chain_waits_and_a_broken_link_cancels_the_rest_in_one_pass(
    ctx: Context,
) -> None:
    compile_, train, evaluate = (
        "wsjob-compile0000000",
        "wsjob-train000000000",
        "wsjob-eval0000000000",
    )
    _submit(ctx, compile_, "default", 1, at=NOW)
    _submit(ctx, train, "default", 1, at=NOW + 1, depends_on=(Dependency(compile_),))
    _submit(ctx, evaluate, "default", 1, at=NOW + 2, depends_on=(Dependency(train),))
    scheduler = SchedulerLoop(ctx)
    assert await scheduler.run_once() == 1  # only compile: the others wait
    assert await scheduler.run_once() == 0  # (reasons are as of the start of a pass)
    assert shown(ctx, train).pending_reason == f"waiting for {compile_} (SCHEDULED) to succeed"
    assert shown(ctx, evaluate).pending_reason == f"waiting for {train} (QUEUED) to succeed"
    assert ctx.store.set_phase(compile_, Phase.FAILED, "model error", ctx.clock()).applied

    await scheduler.run_once()
    train_job, eval_job = ctx.store.get_job(train), ctx.store.get_job(evaluate)
    assert (train_job.phase, eval_job.phase) == (Phase.CANCELLED, Phase.CANCELLED)
    assert train_job.reason == (
        f"dependency {compile_} is FAILED and this job was to run only after it succeeded"
    )
    assert eval_job.reason.startswith(f"dependency {train} is CANCELLED")


async def test_afterany_and_afternotok(ctx: Context) -> None:
    first, cleanup, alert = "wsjob-first00000000", "wsjob-cleanup000000", "wsjob-alert00000000"
    _submit(ctx, first, "default", 1, at=NOW)
    _submit(ctx, cleanup, "default", 1, at=NOW + 1,
            depends_on=(Dependency(first, Condition.AFTERANY),))  # fmt: skip
    _submit(ctx, alert, "default", 1, at=NOW + 2,
            depends_on=(Dependency(first, Condition.AFTERNOTOK),))  # fmt: skip
    assert ctx.store.set_phase(first, Phase.SUCCEEDED, "done", ctx.clock()).applied is False
    assert (await ctx.set_phase(first, Phase.CANCELLED, "stop")).applied
    scheduler = SchedulerLoop(ctx)
    assert await scheduler.run_once() == 2
    assert _scheduled(ctx) == sorted([cleanup, alert])


async def test_a_job_cancelled_for_its_dependency_preempts_nobody(ctx: Context) -> None:
    """The cascade's cancels happen before admission: a P1 job whose dependency broke in this
    pass never becomes a head (that would preempt the running P3 job for nothing)."""
    low, gone, urgent = "wsjob-low0000000000", "wsjob-gone000000000", "wsjob-urgent0000000"
    [job] = new_jobs([low], Priority.P3, 4)
    create(ctx, [job], NOW)
    scheduler = SchedulerLoop(ctx)
    assert await scheduler.run_once() == 1
    _run(ctx, low)
    _submit(ctx, gone, "default", 1, at=NOW + 1)
    assert (await ctx.set_phase(gone, Phase.CANCELLED, "no")).applied
    [dependent] = new_jobs([urgent], Priority.P1, 4)
    spec = dataclasses.replace(dependent.spec, depends_on=(Dependency(gone),))
    create(ctx, [dataclasses.replace(dependent, spec=spec)], NOW + 2)

    await scheduler.run_once()
    assert ctx.store.get_job(urgent).phase is Phase.CANCELLED
    assert ctx.store.requeue_requests() == []  # the P3 job runs on


async def test_priority_preemption_within_a_queue_heeds_its_quota(ctx: Context) -> None:
    """nlp (quota 2) runs a P3 job on its 2 systems; vision keeps its 2 idle systems to itself.
    A P1 job of nlp fits the pool but not nlp's quota: the P3 job is preempted for it."""
    _queues(ctx, nlp=1.0)
    vision = validate_queue(name="vision", systems=2, lend=False)
    ctx.store.put_queue("vision", lambda _current: vision, lambda _queues: None)
    scheduler = SchedulerLoop(ctx)
    [low] = new_jobs(["wsjob-nlplow000000000"], Priority.P3, 2)
    create(ctx, [dataclasses.replace(low, spec=dataclasses.replace(
        low.spec, queue="nlp"))], NOW)  # fmt: skip
    assert await scheduler.run_once() == 1
    _run(ctx, "wsjob-nlplow000000000")
    [high] = new_jobs(["wsjob-nlphigh00000000"], Priority.P1, 2)
    create(ctx, [dataclasses.replace(high, spec=dataclasses.replace(
        high.spec, queue="nlp"))], NOW + 1)  # fmt: skip

    assert await scheduler.run_once() == 0
    [request] = ctx.store.requeue_requests()
    assert (request.job_id, request.preempted_by) == (
        "wsjob-nlplow000000000", "wsjob-nlphigh00000000",
    )  # fmt: skip
    assert shown(ctx, "wsjob-nlphigh00000000").pending_reason.startswith(
        "waiting to preempt wsjob-nlplow000000000 (P3)"
    )


async def test_a_job_that_enters_the_queue_during_a_pass_waits_for_the_next(
    ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A door may bring the queue index up to date while a pass reads the store: a job that
    came in then was not in the pass's dependency read, so this pass leaves it alone (found
    in a clean-clone CI run: an eval job that was to wait for its training started with it)."""
    train, evaluate = "wsjob-train00000000", "wsjob-evaluate00000"
    create(ctx, new_jobs([train], Priority.P2, 1), NOW)
    scheduler = SchedulerLoop(ctx)
    read_dependencies = scheduler._dependencies

    async def a_submit_meanwhile(
        states: list[DependencyState],
    ) -> tuple[dict[str, str], set[str]]:
        found = await read_dependencies(states)
        [job] = new_jobs([evaluate], Priority.P2, 1)
        spec = dataclasses.replace(job.spec, depends_on=(Dependency(train),))
        create(ctx, [dataclasses.replace(job, spec=spec)], NOW + 1)
        await ctx.backlog.current()  # e.g. a GetJob of it, in the middle of the pass
        return found

    monkeypatch.setattr(scheduler, "_dependencies", a_submit_meanwhile)
    assert await scheduler.run_once() == 1
    assert _scheduled(ctx) == [train]
    monkeypatch.undo()
    assert await scheduler.run_once() == 0
    assert shown(ctx, evaluate).pending_reason == f"waiting for {train} (SCHEDULED) to succeed"


async def test_a_queues_caps_per_user_keep_a_users_jobs_waiting_and_others_go_on(
    ctx: Context,
) -> None:
    """#37: max_running_jobs_per_user and max_systems_per_user counted from what each user's
    jobs in the queue hold in the store and what the pass admits; stepped over, never heads."""
    spec = validate_queue(name="nlp", systems=4, max_running_jobs_per_user=2)
    ctx.store.put_queue("nlp", lambda _current: spec, lambda _queues: None)
    for i in range(3):
        _submit(ctx, f"wsjob-capalice00{i}", "nlp", 1, NOW + i)
    [bobs] = new_jobs(["wsjob-capbob0000"], Priority.P2, 1)
    bob = dataclasses.replace(bobs, user="bob", spec=dataclasses.replace(bobs.spec, queue="nlp"))
    create(ctx, [bob], NOW + 5)
    loop = SchedulerLoop(ctx)
    assert await loop.run_once() == 3
    assert _scheduled(ctx) == ["wsjob-capalice000", "wsjob-capalice001", "wsjob-capbob0000"]
    third = shown(ctx, "wsjob-capalice002")
    assert third.pending_reason_code == "QueueUserJobLimit", third.pending_reason
    assert "alice has 2 of their 2 jobs running in queue nlp" in third.pending_reason
    assert await loop.run_once() == 0  # what the store says they hold counts on the next pass

    capped = validate_queue(name="nlp", systems=4, max_systems_per_user=2)
    ctx.store.put_queue("nlp", lambda _current: capped, lambda _queues: None)
    await ctx.set_phase("wsjob-capalice000", Phase.CANCELLED, "done")
    _submit(ctx, "wsjob-capalice003", "nlp", 1, NOW + 9)
    await loop.run_once()  # 1 held of 2: the third fits again, the fourth would make 3
    assert ctx.store.get_job("wsjob-capalice002").phase is Phase.SCHEDULED
    fourth = shown(ctx, "wsjob-capalice003")
    assert fourth.pending_reason_code == "QueueUserSystemLimit", fourth.pending_reason


async def test_a_pass_over_queues_makes_one_trip_to_the_stores_writer_before_deciding(
    ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the fold of ended attempts goes to the writer before deciding (each trip waits
    behind the writes queued for it: with 30 queues and a deep backlog, three trips made
    passes of ~0.7 s, #38); what runs and the queues' usage are read on a reader thread after
    it. The only other trip to the writer is the decisions'."""
    _queues(ctx, nlp=1.0, vision=1.0)
    _submit(ctx, "wsjob-nlp0000aaaaaaaa", "nlp", 2, at=NOW)
    trips: list[str] = []
    db = ctx.db

    async def counted(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        trips.append(getattr(fn, "__name__", repr(fn)))
        return await db(fn, *args, **kwargs)

    monkeypatch.setattr(ctx, "db", counted)
    assert await SchedulerLoop(ctx).run_once() == 1
    assert trips == ["fold_usage", "schedule_many"]
