"""ReplicaService over a real store: a job runs when its last replica registers, progress is
recorded and published while the job lives, and a replica of an ended job is told to stop."""

from __future__ import annotations

import asyncio

import pytest

from appliance.domain.errors import Conflict, DeadlineExceeded, NotFound
from appliance.domain.job import Progress
from appliance.domain.phases import Phase
from appliance.loops.scheduling import SchedulerLoop
from appliance.services.context import Context
from appliance.services.replicas import Directive, ReplicaService
from tests.unit.harness import NOW, create, new_jobs

JOB = "wsjob-replicas000000"


@pytest.fixture
async def replicas(ctx: Context) -> ReplicaService:
    """JOB, scheduled and launched: INITIALIZING, no replica registered yet."""
    create(ctx, new_jobs([JOB]), NOW)
    await SchedulerLoop(ctx).run_once()
    await ctx.set_phase(JOB, Phase.INITIALIZING, "started", expected=Phase.SCHEDULED)
    return ReplicaService(ctx)


async def test_the_job_runs_when_its_last_replica_registers(
    ctx: Context, replicas: ReplicaService
) -> None:
    names = [r.name for r in ctx.store.replicas(JOB)]
    waiter = asyncio.create_task(replicas.await_running(JOB, 1, 30))
    for name in names[:-1]:
        await replicas.register(JOB, 1, name, "127.0.0.1:2", 42)
        assert ctx.store.get_job(JOB).phase is Phase.INITIALIZING
    assert not waiter.done()
    await replicas.register(JOB, 1, names[-1], "127.0.0.1:2", 42)
    running = await asyncio.wait_for(waiter, 30)
    assert running.phase is Phase.RUNNING
    assert {r.address for r in running.replicas} == {"127.0.0.1:2"}
    with pytest.raises(NotFound, match="has no replica cs2-9"):
        await replicas.register(JOB, 1, "cs2-9", "127.0.0.1:2", 42)


async def test_a_gang_registers_in_one_call_and_says_when_it_made_the_job_run(
    ctx: Context, replicas: ReplicaService
) -> None:
    """The simulated backend's gang: one request of the group commit per job, each replica
    recorded (READY, its address) as if alone, and True only from the call that moved the
    job to RUNNING; a refusal of one replica is raised."""
    names = [r.name for r in ctx.store.replicas(JOB)]
    assert not await replicas.register_gang(JOB, 1, [(names[0], "sim:a", 0)])
    assert ctx.store.get_job(JOB).phase is Phase.INITIALIZING
    rest = [(name, "sim:a", 0) for name in names[1:]]
    assert await replicas.register_gang(JOB, 1, rest)
    job = ctx.store.get_job(JOB)
    assert job.phase is Phase.RUNNING
    assert {(r.phase.value, r.address) for r in job.replicas} == {("READY", "sim:a")}
    assert not await replicas.register_gang(JOB, 1, rest)  # a retried call: recorded already
    with pytest.raises(Conflict, match=f"{names[1]} of .* is already registered at sim:a"):
        await replicas.register_gang(JOB, 1, [(names[1], "sim:b", 0)])


async def test_a_job_still_starting_after_the_wait_is_not_yet_not_a_conflict(
    ctx: Context, replicas: ReplicaService
) -> None:
    """A "not yet" (the caller asks again) is not an "over" (the caller stops): a chief whose
    peers' pods wait for a node longer than one window must keep waiting."""
    with pytest.raises(DeadlineExceeded, match=r"not running after 0 s \(INITIALIZING\)"):
        await replicas.await_running(JOB, 1, 0.01)
    await ctx.set_phase(JOB, Phase.FAILED, "pods unschedulable")
    with pytest.raises(Conflict, match="is FAILED: pods unschedulable"):
        await replicas.await_running(JOB, 1, 0.01)


async def test_a_replica_registers_once_and_a_second_address_is_refused(
    ctx: Context, replicas: ReplicaService
) -> None:
    """Otherwise any process could re-register a replica at its own address (authentication
    off) and have the chief send it the topology and the job's data-plane token."""
    await replicas.register(JOB, 1, "cs2-0", "127.0.0.1:2", 42)
    await replicas.register(JOB, 1, "cs2-0", "127.0.0.1:2", 42)  # a retried call is fine
    with pytest.raises(Conflict, match=r"cs2-0 of .* is already registered at 127\.0\.0\.1:2"):
        await replicas.register(JOB, 1, "cs2-0", "127.0.0.1:6666", 666)
    (cs2,) = [r for r in ctx.store.replicas(JOB) if r.name == "cs2-0"]
    assert (cs2.address, cs2.pid) == ("127.0.0.1:2", 42)


async def test_progress_is_recorded_and_published_until_the_job_ends(
    ctx: Context, replicas: ReplicaService
) -> None:
    progress = Progress(step=2, num_steps=5, loss=0.25)
    with ctx.bus.subscribe(JOB) as live:
        assert (await replicas.report_progress(JOB, 1, progress)).keep_running
        assert live.get_nowait().progress == progress
    assert ctx.store.get_job(JOB).progress == progress
    assert await replicas.directive(JOB, 1) == Directive(True, Phase.INITIALIZING)

    await ctx.set_phase(JOB, Phase.CANCELLED, "stop")
    later = Progress(step=3, num_steps=5, loss=0.2)
    assert not (await replicas.report_progress(JOB, 1, later)).keep_running
    assert ctx.store.get_job(JOB).progress == progress  # not written after the end
    assert await replicas.directive(JOB, 1) == Directive(False, Phase.CANCELLED)
    with pytest.raises(Conflict, match="is CANCELLED"):
        await replicas.await_running(JOB, 1, 30)
    with pytest.raises(NotFound):
        await replicas.report_progress("wsjob-replicas999999", 1, later)


async def test_a_replica_of_an_attempt_that_is_over_cannot_act_for_the_next(
    ctx: Context, replicas: ReplicaService
) -> None:
    """After a requeue the job runs attempt 2: replicas of attempt 1 are refused every write
    and told to stop, while those of attempt 2 go on."""
    await ctx.set_phase(JOB, Phase.QUEUED, "requeued")
    await SchedulerLoop(ctx).run_once()
    await ctx.set_phase(JOB, Phase.INITIALIZING, "started", expected=Phase.SCHEDULED)
    assert ctx.store.get_job(JOB).attempt == 2
    with pytest.raises(Conflict, match=r"attempt 1 of job .* is over"):
        await replicas.register(JOB, 1, "cs2-0", "127.0.0.1:2", 42)
    with pytest.raises(Conflict, match=r"attempt 1 of job .* is over"):
        await replicas.await_running(JOB, 1, 30)
    stale = Progress(step=9, num_steps=5, loss=9.0)
    assert not (await replicas.report_progress(JOB, 1, stale)).keep_running
    assert ctx.store.get_job(JOB).progress.step == 0
    assert not (await replicas.directive(JOB, 1)).keep_running
    await replicas.register(JOB, 2, "cs2-0", "127.0.0.1:2", 42)
    assert (await replicas.directive(JOB, 2)).keep_running


async def test_a_heartbeat_writes_the_data_plane_only_when_it_changed(
    ctx: Context, replicas: ReplicaService, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[list[tuple[str, int, str, str]]] = []
    set_data_planes = ctx.store.set_data_planes

    def recorded(batch: list[tuple[str, int, str, str]]) -> list[bool]:
        written.append(list(batch))
        return set_data_planes(batch)

    monkeypatch.setattr(ctx.store, "set_data_planes", recorded)
    said = "shared memory: swarmx-0; grpc: none"

    for _ in range(3):  # not chosen yet, as its row starts: nothing to write
        assert (await replicas.heartbeat(JOB, 1, "chief-0", "")).keep_running
    for _ in range(3):
        assert (await replicas.heartbeat(JOB, 1, "chief-0", said)).keep_running
    assert written == [[(JOB, 1, "chief-0", said)]]  # once, not once a heartbeat
    await replicas.heartbeat(JOB, 1, "chief-0", "grpc: swarmx-0")
    await replicas.heartbeat(JOB, 1, "chief-0", "grpc: swarmx-0")
    assert len(written) == 2
    assert {r.name: r.data_plane for r in ctx.store.replicas(JOB)}["chief-0"] == "grpc: swarmx-0"

    assert not (await replicas.heartbeat(JOB, 2, "chief-0", "grpc: not of it")).keep_running
    await replicas.heartbeat(JOB, 1, "c" * 10_000, "grpc: no such replica")
    await ctx.set_phase(JOB, Phase.CANCELLED, "stop")
    assert not (await replicas.heartbeat(JOB, 1, "chief-0", "grpc: after the end")).keep_running
    assert len(written) == 2  # told to stop, or of no replica: nothing written
