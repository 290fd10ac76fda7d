"""The reconciler turns scheduled jobs into launched ones and replica exits into job phases,
tears down what ended, expires leases and stuck starts, and settles after a restart. Over a
real SQLite store and a recording backend (the Backend protocol is our own seam)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable, Mapping, Sequence

import pytest

from appliance.backends.base import (
    BackendUnavailable,
    OptionalParts,
    ReplicaEvent,
    ReplicaEventKind,
    no_secrets,
)
from appliance.config import ReplicaSettings, RestartSettings
from appliance.domain.job import Job, Progress, Replica
from appliance.domain.phases import Phase
from appliance.domain.plan import CHIEF_REPLICA as CHIEF
from appliance.domain.restarts import EXIT_PEER_FAILED
from appliance.loops.reconciling import Reconciler
from appliance.loops.scheduling import SchedulerLoop
from appliance.services.context import Context
from appliance.services.leadership import Leadership
from appliance.services.replicas import ReplicaService
from tests.unit.harness import NOW, Clock, create, new_jobs

JOB = "wsjob-reconcile00000"
LIFETIMES = ReplicaSettings()  # the init timeout the reconcilers here have


class RecordingBackend(OptionalParts):
    """Starts nothing: records launches and teardowns, fails launches on request, and
    reports what a restart would find."""

    writes_model_dirs = False

    def __init__(self) -> None:
        self.coordinator_address = "127.0.0.1:1"
        self.replica_secrets: Callable[[str, int], Mapping[str, str]] = no_secrets
        self.launched: list[tuple[str, list[str]]] = []
        self.torn_down: list[str] = []
        self.failed_torn_down: list[str] = []  # ... those torn down as FAILED
        self.unavailable: str = ""  # launches raise BackendUnavailable with this while set
        self.live: dict[str, set[str]] = {}
        self.errors: dict[str, str] = {}  # replica -> the error line it left while away
        self.codes: dict[str, dict[str, int]] = {}

    async def launch(self, job: Job, replicas: Sequence[Replica]) -> None:
        if self.unavailable:
            raise BackendUnavailable(self.unavailable)
        self.launched.append((job.id, [r.name for r in replicas]))

    async def observe(self) -> AsyncIterator[ReplicaEvent]:
        return
        yield  # pragma: no cover

    async def teardown(self, job_id: str, *, failed: bool = False) -> None:
        self.torn_down.append(job_id)
        self.failed_torn_down += [job_id] if failed else []

    async def adopt(self) -> dict[str, set[str]]:
        return {job_id: set(names) for job_id, names in self.live.items()}

    def exit_codes(self, job_id: str) -> dict[str, int]:
        return self.codes.get(job_id, {})

    async def away_error(self, job_id: str, replica: str) -> str:
        return self.errors.get(replica, "")

    async def log_tail(self, job_id: str, replica: str, lines: int) -> str:
        return f"last words of {replica}"

    async def read_log(self, job_id: str, replica: str, offset: int) -> tuple[str, int]:
        return "", offset

    def health(self) -> str | None:
        return None

    async def close(self) -> None:
        pass


@pytest.fixture
def backend() -> RecordingBackend:
    return RecordingBackend()


@pytest.fixture
async def reconciler(ctx: Context, backend: RecordingBackend) -> Reconciler:
    """A reconciler with one job, JOB (one CS-2 system), already SCHEDULED."""
    create(ctx, new_jobs([JOB], lease_seconds=30.0), NOW)
    assert await SchedulerLoop(ctx).run_once() == 1
    return Reconciler(ctx, backend, ReplicaService(ctx))


async def _running(ctx: Context, reconciler: Reconciler) -> None:
    """Launch JOB and register all of its replicas, as they would."""
    await reconciler.sweep(timed=False)
    replicas = ReplicaService(ctx)
    for replica in ctx.store.replicas(JOB):
        await replicas.register(
            JOB, ctx.store.get_job(JOB).attempt, replica.name, "127.0.0.1:2", 42
        )
    assert ctx.store.get_job(JOB).phase is Phase.RUNNING


def _last_reason(ctx: Context) -> str:
    return ctx.store.events(JOB)[-1].reason


def _last_code(ctx: Context, job_id: str = JOB) -> str:
    return ctx.store.events(job_id)[-1].reason_code


async def test_a_sweep_launches_scheduled_jobs_and_moves_them_to_initializing(
    ctx: Context, reconciler: Reconciler, backend: RecordingBackend
) -> None:
    await reconciler.sweep(timed=False)
    [(job_id, names)] = backend.launched
    assert job_id == JOB and CHIEF in names
    assert ctx.store.get_job(JOB).phase is Phase.INITIALIZING
    assert _last_reason(ctx) == f"started {len(names)} replicas"
    await reconciler.sweep(timed=False)
    assert len(backend.launched) == 1  # launched once


async def test_an_unavailable_backend_keeps_the_job_scheduled_until_the_init_timeout(
    ctx: Context, reconciler: Reconciler, backend: RecordingBackend, clock: Clock
) -> None:
    backend.unavailable = "the API server is restarting"
    await reconciler.sweep(timed=False)
    job = ctx.store.get_job(JOB)
    assert job.phase is Phase.SCHEDULED
    assert job.pending_reason == (
        "waiting for the backend to start replicas: the API server is restarting"
    )
    clock.now += LIFETIMES.init_timeout_seconds + 1
    await reconciler.sweep(timed=False)
    assert ctx.store.get_job(JOB).phase is Phase.FAILED
    assert _last_reason(ctx).startswith("could not start replicas for ")


async def test_a_replica_that_exits_non_zero_fails_the_job_and_it_is_torn_down(
    ctx: Context, reconciler: Reconciler, backend: RecordingBackend
) -> None:
    await _running(ctx, reconciler)
    exited = ReplicaEvent(JOB, "cs2-0", ReplicaEventKind.EXITED, exit_code=137)
    await reconciler.on_replica_event(exited)
    assert ctx.store.get_job(JOB).phase is Phase.FAILED
    assert _last_reason(ctx) == "replica cs2-0 exited with exit code 137"
    assert _last_code(ctx) == ctx.store.get_job(JOB).reason_code == "ReplicaFailed"
    [cs2] = [r for r in ctx.store.replicas(JOB) if r.name == "cs2-0"]
    assert (cs2.exit_code, cs2.log_tail) == (137, "last words of cs2-0")
    await reconciler.sweep(timed=False)
    await reconciler.drain(10)
    assert backend.torn_down == [JOB] and JOB not in reconciler.active
    assert backend.failed_torn_down == [JOB]  # a keep-failed backend keeps its pods


@pytest.mark.parametrize(
    ("running", "phase", "reason"),
    [
        (True, Phase.SUCCEEDED, "chief finished all steps"),
        (False, Phase.FAILED, "chief exited while the job was INITIALIZING"),
    ],
)
async def test_the_chief_exiting_zero_ends_the_job(
    ctx: Context, reconciler: Reconciler, running: bool, phase: Phase, reason: str
) -> None:
    if running:
        await _running(ctx, reconciler)
    else:
        await reconciler.sweep(timed=False)
    await reconciler.on_replica_event(
        ReplicaEvent(JOB, CHIEF, ReplicaEventKind.EXITED, exit_code=0)
    )
    assert (ctx.store.get_job(JOB).phase, _last_reason(ctx)) == (phase, reason)


async def test_timed_sweeps_cancel_expired_leases_and_fail_stuck_starts(
    ctx: Context, reconciler: Reconciler, clock: Clock
) -> None:
    await reconciler.sweep(timed=False)  # INITIALIZING, no replica registers
    clock.now += LIFETIMES.init_timeout_seconds + 1
    ctx.store.renew_lease(JOB, "laptop", clock.now)  # the client is still there
    await reconciler.sweep(timed=False)
    assert ctx.store.get_job(JOB).phase is Phase.INITIALIZING  # checked only when timed
    await reconciler.sweep(timed=True)
    assert ctx.store.get_job(JOB).phase is Phase.FAILED
    assert _last_reason(ctx).startswith(
        f"replicas not ready after {LIFETIMES.init_timeout_seconds:.0f} s: "
    )
    assert _last_code(ctx) == "NotReady"

    create(ctx, new_jobs(["wsjob-reconcile00001"], lease_seconds=30.0), clock.now)
    clock.now += 31
    await reconciler.sweep(timed=True)
    leased = ctx.store.get_job("wsjob-reconcile00001")
    assert leased.phase is Phase.CANCELLED
    assert ctx.store.events(leased.id)[-1].reason == (
        "client lease expired: no heartbeat for 30 s"
    )
    assert leased.reason_code == _last_code(ctx, leased.id) == "LeaseExpired"


async def test_on_kubernetes_pods_may_wait_the_pending_timeout_before_the_init_timeout(
    ctx: Context, backend: RecordingBackend, clock: Clock
) -> None:
    """A pod waiting for a node fails its job after the pending timeout, with the scheduler's
    reason (the backend says it); the init timeout must not end the job first."""
    backend.start_timeout = 300.0  # a pod's pending timeout, as the Kubernetes backend has it
    create(ctx, new_jobs([JOB]), NOW)
    assert await SchedulerLoop(ctx).run_once() == 1
    reconciler = Reconciler(ctx, backend, ReplicaService(ctx))
    await reconciler.sweep(timed=False)  # INITIALIZING, its pods pending
    clock.now += LIFETIMES.init_timeout_seconds + 1
    await reconciler.sweep(timed=True)
    assert ctx.store.get_job(JOB).phase is Phase.INITIALIZING
    clock.now += 300
    await reconciler.sweep(timed=True)
    assert ctx.store.get_job(JOB).phase is Phase.FAILED
    assert _last_reason(ctx).startswith("replicas not ready after 420 s: ")


@pytest.mark.parametrize(
    ("codes", "phase", "reason"),
    [
        ({"cs2-0": 137}, Phase.FAILED, "replica cs2-0 exited with exit code 137 while the "
         "coordinator was away"),
        ({CHIEF: 0}, Phase.SUCCEEDED, "chief finished all steps while the coordinator was away"),
        ({CHIEF: 1}, Phase.FAILED, "replica chief-0 exited with exit code 1 while the "
         "coordinator was away: ValueError: why"),
        ({}, Phase.FAILED, "replicas gone after a coordinator restart: "),
    ],
)  # fmt: skip
async def test_a_restart_settles_jobs_whose_replicas_ended_meanwhile(
    ctx: Context,
    reconciler: Reconciler,
    backend: RecordingBackend,
    codes: dict[str, int],
    phase: Phase,
    reason: str,
) -> None:
    await _running(ctx, reconciler)
    backend.codes[JOB] = codes
    backend.errors[CHIEF] = "ValueError: why"
    restarted = Reconciler(ctx, backend, ReplicaService(ctx))
    await restarted.recover()
    assert ctx.store.get_job(JOB).phase is phase
    assert _last_reason(ctx).startswith(reason)
    assert JOB in restarted.active  # to be torn down by the next sweep


async def test_a_restart_adopts_jobs_whose_replicas_all_still_run(
    ctx: Context, reconciler: Reconciler, backend: RecordingBackend
) -> None:
    await _running(ctx, reconciler)
    backend.live[JOB] = {r.name for r in ctx.store.replicas(JOB)}
    restarted = Reconciler(ctx, backend, ReplicaService(ctx))
    await restarted.recover()
    assert ctx.store.get_job(JOB).phase is Phase.RUNNING
    assert JOB in restarted.active and ctx.bus.reconcile_wanted.is_set()


# ---- restarts (domain/restarts.py) ------------------------------------------------------------


@pytest.fixture
async def restarting(ctx: Context, backend: RecordingBackend) -> Reconciler:
    """JOB (allowed one restart) SCHEDULED, on a reconciler that requeues without a pause."""
    spec = dataclasses.replace(new_jobs([JOB])[0].spec, max_restarts=1)
    [job] = new_jobs([JOB], lease_seconds=30.0)
    create(ctx, [dataclasses.replace(job, spec=spec)], NOW)
    assert await SchedulerLoop(ctx).run_once() == 1
    quick = RestartSettings(backoff_seconds=0.0)
    return Reconciler(ctx, backend, ReplicaService(ctx), restarts=quick)


async def test_a_retryable_failure_tears_the_gang_down_and_requeues_the_job(
    ctx: Context, restarting: Reconciler, backend: RecordingBackend
) -> None:
    await _running(ctx, restarting)
    killed = ReplicaEvent(JOB, "cs2-0", ReplicaEventKind.EXITED, exit_code=137, attempt=1)
    await restarting.on_replica_event(killed)
    # The teardown's own SIGTERMs are no failure of the job.
    stopped = ReplicaEvent(JOB, "chief-0", ReplicaEventKind.EXITED, exit_code=143, attempt=1)
    await restarting.on_replica_event(stopped)
    await restarting.drain(10)

    job = ctx.store.get_job(JOB)
    assert (job.phase, job.restarts, backend.torn_down) == (Phase.QUEUED, 1, [JOB])
    assert _last_reason(ctx) == (
        "replica cs2-0 exited with exit code 137; restarting from the start (no checkpoint yet) "
        "(restart 1 of 1); requeued at position 1"
    )
    assert _last_code(ctx) == job.pending_reason_code == "Restarting"
    # An exit of the ended attempt arriving late changes nothing, queued or running again.
    await restarting.on_replica_event(killed)
    assert ctx.store.get_job(JOB).phase is Phase.QUEUED
    assert await SchedulerLoop(ctx).run_once() == 1
    await _running(ctx, restarting)
    await restarting.on_replica_event(killed)
    assert ctx.store.get_job(JOB).phase is Phase.RUNNING and ctx.store.get_job(JOB).attempt == 2

    # The second attempt has no restart left.
    again = ReplicaEvent(JOB, "cs2-0", ReplicaEventKind.EXITED, exit_code=137, attempt=2)
    await restarting.on_replica_event(again)
    assert ctx.store.get_job(JOB).phase is Phase.FAILED
    assert _last_reason(ctx).endswith("(no restarts left: 1 of 1 used)")
    assert ctx.store.get_job(JOB).reason_code == "ReplicaFailed"  # the cause's code


async def test_replicas_gone_without_a_trace_after_a_restart_are_lost_and_retried(
    ctx: Context, restarting: Reconciler, backend: RecordingBackend
) -> None:
    """Nothing adopted and no exit code left (the sim backend's replicas die with the
    coordinator; local ones killed with their host): the job is restarted as its policy says,
    not left holding its systems nor failed when it may run again."""
    await _running(ctx, restarting)
    restarted = Reconciler(restarting.ctx, backend, ReplicaService(restarting.ctx))
    await restarted.recover()
    await restarted.drain(10)
    job = ctx.store.get_job(JOB)
    assert (job.phase, job.restarts, job.retries) == (Phase.QUEUED, 1, 1)
    assert _last_reason(ctx).startswith("replicas gone after a coordinator restart: chief-0, ")
    assert "restarting from the start (no checkpoint yet) (restart 1 of 1)" in _last_reason(ctx)
    assert _last_code(ctx) == "Restarting"


async def test_a_checkpoint_reported_after_the_decision_is_the_one_the_reason_names(
    ctx: Context, restarting: Reconciler
) -> None:
    """The chief wrote a checkpoint just before its CS-2 was killed and reported it just after:
    the next attempt resumes from that one (the newest on disk), so the requeue says so."""
    await _running(ctx, restarting)
    replicas = ReplicaService(ctx)
    await replicas.report_progress(JOB, 1, Progress(step=170, num_steps=5, checkpoint_step=150))
    await restarting.on_replica_event(
        ReplicaEvent(JOB, "cs2-0", ReplicaEventKind.EXITED, exit_code=137, attempt=1)
    )
    await replicas.report_progress(JOB, 1, Progress(step=201, num_steps=5, checkpoint_step=200))
    await restarting.drain(10)
    assert ctx.store.get_job(JOB).phase is Phase.QUEUED
    assert _last_reason(ctx) == (
        "replica cs2-0 exited with exit code 137; restarting from step 200 (restart 1 of 1); "
        "requeued at position 1"
    )
    assert _last_code(ctx) == "Restarting"


async def test_a_plain_failure_is_never_retried(ctx: Context, restarting: Reconciler) -> None:
    await _running(ctx, restarting)
    await restarting.on_replica_event(
        ReplicaEvent(JOB, "chief-0", ReplicaEventKind.EXITED, exit_code=1, attempt=1)
    )
    assert ctx.store.get_job(JOB).phase is Phase.FAILED  # a params or model error
    assert _last_reason(ctx) == "replica chief-0 exited with exit code 1"


@pytest.mark.parametrize("chief_first", [True, False], ids=["chief-first", "cs2-first"])
async def test_a_chief_that_ended_because_a_cs2_did_waits_for_the_cs2s_own_end(
    ctx: Context, restarting: Reconciler, clock: Clock, chief_first: bool
) -> None:
    """On Kubernetes both pods' ends come in one relist, in either order: the job is judged by
    the killed CS-2 (retryable), not by the chief's consequent exit 4 (which alone is not)."""
    await _running(ctx, restarting)
    chief = ReplicaEvent(
        JOB, CHIEF, ReplicaEventKind.EXITED, exit_code=EXIT_PEER_FAILED, attempt=1
    )
    killed = ReplicaEvent(JOB, "cs2-0", ReplicaEventKind.EXITED, exit_code=137, attempt=1)
    if chief_first:
        await restarting.on_replica_event(chief)
        await restarting.sweep()
        assert ctx.store.get_job(JOB).phase is Phase.RUNNING  # held: waiting for the cause
    await restarting.on_replica_event(killed)
    await restarting.on_replica_event(chief)  # again, or late: an ending attempt's
    clock.now += RestartSettings.peer_failure_settle_seconds + 1
    await restarting.sweep()
    await restarting.drain(10)
    assert ctx.store.get_job(JOB).phase is Phase.QUEUED
    assert _last_reason(ctx).startswith("replica cs2-0 exited with exit code 137; restarting")


async def test_a_consequence_nobody_explains_decides_by_itself_after_the_window(
    ctx: Context, restarting: Reconciler, clock: Clock
) -> None:
    await _running(ctx, restarting)
    await restarting.on_replica_event(
        ReplicaEvent(JOB, CHIEF, ReplicaEventKind.EXITED, exit_code=EXIT_PEER_FAILED, attempt=1)
    )
    await restarting.sweep()
    assert ctx.store.get_job(JOB).phase is Phase.RUNNING  # waiting for a cause
    clock.now += RestartSettings.peer_failure_settle_seconds
    await restarting.sweep()
    assert ctx.store.get_job(JOB).phase is Phase.FAILED  # exit 4 alone is no retryable end
    assert _last_reason(ctx) == "replica chief-0 exited with exit code 4"


async def _recovered_after(
    restarting: Reconciler, backend: RecordingBackend, codes: dict[str, int]
) -> None:
    """A coordinator restarted after JOB's replicas ended with `codes`, its recovery done."""
    backend.codes[JOB] = codes
    restarted = Reconciler(restarting.ctx, backend, ReplicaService(restarting.ctx))
    await restarted.recover()
    await restarted.drain(10)


async def test_away_the_cause_is_chosen_over_its_consequence(
    ctx: Context, restarting: Reconciler, backend: RecordingBackend
) -> None:
    await _running(ctx, restarting)
    await _recovered_after(restarting, backend, {"chief-0": EXIT_PEER_FAILED, "cs2-0": 137})
    assert ctx.store.get_job(JOB).phase is Phase.QUEUED
    assert _last_reason(ctx).startswith("replica cs2-0 exited with exit code 137 while")


async def test_a_retryable_failure_while_the_coordinator_was_away_restarts_too(
    ctx: Context, restarting: Reconciler, backend: RecordingBackend
) -> None:
    await _running(ctx, restarting)
    await _recovered_after(restarting, backend, {"cs2-0": 143})
    assert ctx.store.get_job(JOB).phase is Phase.QUEUED
    assert _last_reason(ctx).startswith(
        "replica cs2-0 exited with exit code 143 while the coordinator was away; restarting"
    )


async def test_a_coordinator_that_stopped_leading_launches_and_tears_down_nothing(
    ctx: Context, reconciler: Reconciler, backend: RecordingBackend
) -> None:
    ctx.leadership = Leadership("old leader", elected=True)  # a standby, or past its deadline
    await reconciler.sweep(timed=False)
    assert backend.launched == [] and ctx.store.get_job(JOB).phase is Phase.SCHEDULED
    reconciler.active.add("wsjob-ended0000000001")
    reconciler._start_teardown("wsjob-ended0000000001", failed=False)
    await reconciler.drain(10)
    assert backend.torn_down == []
