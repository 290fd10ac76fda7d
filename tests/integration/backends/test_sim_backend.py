"""SimBackend on a clock the test moves, reporting to a recorder of the coordinator's side of
the seam (ReplicaCalls is our own): the backend contract, then training, checkpoints,
checkpoint-now, stop, resume and injected failures."""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import itertools
from collections.abc import Sequence
from pathlib import Path

import pytest

from appliance.backends.base import ReplicaEventKind
from appliance.backends.sim import FailurePlan, SimBackend
from appliance.domain.job import Job, Progress
from appliance.domain.simulation import FailAt
from appliance.domain.spec import SIM_STEP_SECONDS_LABEL, JobSpec
from tests.integration.backends.contract import (
    JOB_ID,
    NAMES,
    BackendContract,
    collect,
    contract_job,
)

PARAMS = "model: {name: fc_mnist}\nrunconfig: {checkpoint_steps: 100}\n"


class ManualClock:
    """The injected clock: time stands still until `advance`, which wakes the sleepers due."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._slept = asyncio.Event()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        wake = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + seconds, next(self._order), wake))
        self._slept.set()
        await wake

    async def tick(self, seconds: float) -> None:
        """Once someone sleeps on the clock, move it on by `seconds`."""
        while not self._sleepers:
            self._slept.clear()
            await asyncio.wait_for(self._slept.wait(), 5)
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        while self._sleepers and self._sleepers[0][0] <= self.now:
            _, _, wake = heapq.heappop(self._sleepers)
            if not wake.done():
                wake.set_result(None)


@dataclasses.dataclass(frozen=True)
class Answer:
    keep_running: bool = True
    checkpoint_now: bool = False


class RecordingCalls:
    """The coordinator's side, in memory: registrations, the chief's reports (a queue the test
    waits on), and the answer the test sets. Every job runs as soon as it is launched."""

    def __init__(self) -> None:
        self.registered: list[tuple[str, int, str]] = []
        self.reports: asyncio.Queue[tuple[Progress, bool]] = asyncio.Queue()
        self.answer = Answer()
        self.reads = 0

    async def register_gang(
        self, job_id: str, attempt: int, replicas: Sequence[tuple[str, str, int]]
    ) -> bool:
        self.registered.extend((job_id, attempt, name) for name, _, _ in replicas)
        return True

    async def wait_running(self, job_id: str, attempt: int, wait_seconds: float) -> None:
        return None

    async def report_progress(
        self, job_id: str, attempt: int, progress: Progress, checkpointed: bool = False
    ) -> Answer:
        self.reports.put_nowait((progress, checkpointed))
        if checkpointed:
            self.answer = Answer(keep_running=False)  # as the store answers after it
        return self.answer

    async def directive(self, job_id: str, attempt: int) -> Answer:
        self.reads += 1
        return self.answer

    async def next_report(self) -> tuple[Progress, bool]:
        return await asyncio.wait_for(self.reports.get(), 5)


def sim_backend(
    calls: RecordingCalls, clock: ManualClock, step_seconds: float, **failures: object
) -> SimBackend:
    return SimBackend(
        calls,
        step_seconds=step_seconds,
        failures=FailurePlan(**failures),  # type: ignore[arg-type]
        clock=clock,
        sleep=clock.sleep,
        report_interval=0.5,
    )


class TestSimBackendContract(BackendContract):
    """Finishing: zero-time steps; running: 10 steps of an hour on a clock nobody moves."""

    survives_restart = False

    async def backend(self, tmp_path: Path, *, finishing: bool) -> SimBackend:
        return sim_backend(RecordingCalls(), ManualClock(), 0.0 if finishing else 3600.0)

    async def restarted(self, tmp_path: Path) -> SimBackend:
        return sim_backend(RecordingCalls(), ManualClock(), 0.0)


def job_of(num_steps: int, attempt: int = 1, labels: dict[str, str] | None = None) -> Job:
    job, _ = contract_job(attempt)
    spec = JobSpec(params_yaml=PARAMS, num_csx=2, num_steps=num_steps, labels=labels or {})
    return dataclasses.replace(job, spec=spec)


async def test_a_job_trains_on_the_clock_reporting_a_few_times_a_second() -> None:
    calls, clock = RecordingCalls(), ManualClock()
    backend = sim_backend(calls, clock, step_seconds=0.01)
    _, replicas = contract_job()
    events = backend.observe()
    await backend.launch(job_of(1000), replicas)
    await collect(events, ReplicaEventKind.STARTED, len(NAMES))
    for _ in range(4):  # 2 s of the clock, in reports every 0.5 s (every 50 steps)
        await clock.tick(0.5)
        progress, _ = await calls.next_report()
    assert (progress.step, progress.checkpoint_step, progress.resumed_from_step) == (200, 200, 0)
    assert progress.steps_per_second == pytest.approx(100)
    assert sorted(r for _, _, r in calls.registered) == sorted(NAMES)

    await clock.tick(100)  # long past the end: one jump, one final report
    final, _ = await calls.next_report()
    exited = await collect(events, ReplicaEventKind.EXITED, len(NAMES))
    assert (final.step, final.checkpoint_step) == (1000, 900)
    assert [(e.replica, e.exit_code) for e in exited][-1] == ("chief-0", 0)  # the chief last
    assert "step 1000/1000" in await backend.log_tail(JOB_ID, "chief-0", 3)
    await backend.close()


async def test_the_label_sets_the_step_time_and_zero_ends_the_job_at_once() -> None:
    calls, clock = RecordingCalls(), ManualClock()
    backend = sim_backend(calls, clock, step_seconds=3600.0)
    _, replicas = contract_job()
    await backend.launch(job_of(10**9, labels={SIM_STEP_SECONDS_LABEL: "0"}), replicas)
    exited = await collect(backend.observe(), ReplicaEventKind.EXITED, len(NAMES))
    assert {e.exit_code for e in exited} == {0}
    final, _ = await calls.next_report()
    assert final.step == 10**9 and calls.reports.empty()  # one report for the whole job
    await backend.close()


async def test_a_bad_label_fails_the_launch_naming_it() -> None:
    backend = sim_backend(RecordingCalls(), ManualClock(), step_seconds=0.0)
    _, replicas = contract_job()
    with pytest.raises(ValueError, match=f"label {SIM_STEP_SECONDS_LABEL} must be a number"):
        await backend.launch(job_of(10, labels={SIM_STEP_SECONDS_LABEL: "fast"}), replicas)
    await backend.close()


async def test_checkpoint_now_is_reported_then_the_replicas_stop_as_told() -> None:
    calls, clock = RecordingCalls(), ManualClock()
    backend = sim_backend(calls, clock, step_seconds=0.01)
    _, replicas = contract_job()
    await backend.launch(job_of(1000), replicas)
    await clock.tick(0.5)
    await calls.next_report()
    calls.answer = Answer(checkpoint_now=True)  # the job is being preempted
    await clock.tick(0.87)
    asked, checkpointed = await calls.next_report()
    assert not checkpointed and (asked.step, asked.checkpoint_step) == (137, 100)
    written, checkpointed = await calls.next_report()
    assert checkpointed and (written.step, written.checkpoint_step) == (137, 137)
    exited = await collect(backend.observe(), ReplicaEventKind.EXITED, len(NAMES))
    assert {e.exit_code for e in exited} == {0}  # stopped as told, before any teardown
    await backend.teardown(JOB_ID)  # the requeue's: nothing left to stop
    await backend.close()


async def test_a_later_attempt_resumes_from_the_newest_checkpoint() -> None:
    calls, clock = RecordingCalls(), ManualClock()
    backend = sim_backend(calls, clock, step_seconds=0.01)
    _, replicas = contract_job(attempt=2)
    job = dataclasses.replace(job_of(1000, attempt=2), progress=Progress(checkpoint_step=870))
    await backend.launch(job, replicas)
    await clock.tick(0.5)
    progress, _ = await calls.next_report()
    assert (progress.step, progress.resumed_from_step, progress.checkpoint_step) == (920, 870, 900)
    await backend.teardown(JOB_ID)
    await backend.close()


async def test_a_named_failure_kills_its_replica_on_the_first_attempt_only() -> None:
    calls, clock = RecordingCalls(), ManualClock()
    backend = sim_backend(calls, clock, 0.0, fail_at=[FailAt("cs2-1", 250)], seed=1)
    _, replicas = contract_job()
    events = backend.observe()
    await backend.launch(job_of(1000), replicas)
    [killed] = await collect(events, ReplicaEventKind.EXITED, 1)
    assert (killed.replica, killed.exit_code) == ("cs2-1", 137)
    assert killed.message == "killed by SIGKILL (simulated: APPLIANCE_SIM_FAIL_AT cs2-1@250)"
    reported, _ = await calls.next_report()  # the checkpoint before it, for the restart
    assert (reported.step, reported.checkpoint_step) == (250, 200)
    waiting = set(NAMES) - {"cs2-1"}  # the input workers too
    assert await backend.adopt() == {JOB_ID: waiting}  # waiting for teardown
    await backend.teardown(JOB_ID)
    rest = await collect(events, ReplicaEventKind.EXITED, len(waiting))
    assert {(e.replica, e.exit_code) for e in rest} == {(name, 143) for name in waiting}

    second = dataclasses.replace(job_of(1000, attempt=2), progress=Progress(checkpoint_step=200))
    await backend.launch(second, replicas)
    finished = await collect(events, ReplicaEventKind.EXITED, len(NAMES))
    assert {e.exit_code for e in finished} == {0}
    await backend.close()


async def test_a_failure_rate_of_one_kills_every_attempt_the_same_way_for_a_seed() -> None:
    plan = FailurePlan(rate=1.0, seed=7)
    first = plan.first_failure("wsjob-a", 1, NAMES, 0, 1000)
    assert first is not None and 0 <= first.step < 1000
    assert first == FailurePlan(rate=1.0, seed=7).first_failure("wsjob-a", 1, NAMES, 0, 1000)
    assert plan.first_failure("wsjob-a", 2, NAMES, 990, 1000) is not None  # every attempt
    assert plan.first_failure("wsjob-a", 2, NAMES, 1000, 1000) is None  # nothing left to run
    assert FailurePlan(rate=0.0, seed=7).first_failure("wsjob-a", 1, NAMES, 0, 1000) is None
