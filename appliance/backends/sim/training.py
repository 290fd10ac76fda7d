"""One attempt of a job on the simulated backend: its replicas, and its chief's loop.

Invariants:
- Every replica of the attempt is alive from its launch until its one EXITED event: 0 when
  the job did all its steps or the coordinator said stop, 137 for the replica a failure is
  injected into (the rest of the gang then waits for its teardown, as a real gang whose
  member died does), 143 when torn down. Nothing follows a replica's EXITED.
- The steps done are a function of the clock, `start + (now - began) // step_seconds`: the
  loop sleeps until the next thing that matters (a report, the injected failure, the end),
  never once per step, so a billion-step job costs what a ten-step one does.
- The chief writes progress at most once per `report_interval` of the clock, when it passed
  a checkpoint, when it is asked for one, and at the end; between writes it only reads the
  directive (checkpoint now, or stop).
- Checkpoints are taken every runconfig.checkpoint_steps and when asked (checkpoint-now, a
  preemption). An attempt starts from the job's newest checkpoint as the store has it
  (job.progress.checkpoint_step, which a requeue keeps), as a real chief starts from the
  newest checkpoint in its model dir. Every mode runs its steps (eval and compile too).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping

from appliance.backends.base import ReplicaEvent, ReplicaEventKind
from appliance.backends.sim.calls import Directive, ReplicaCalls
from appliance.backends.sim.failures import Failure
from appliance.domain.errors import ApplianceError, Conflict, DeadlineExceeded, Unavailable
from appliance.domain.job import Progress
from appliance.domain.plan import CHIEF_REPLICA

log = logging.getLogger(__name__)

EXIT_KILLED = 137  # 128 + SIGKILL
EXIT_TERMINATED = 143  # 128 + SIGTERM
AWAIT_RUNNING_SECONDS = 60.0


class SimulatedAttempt:
    def __init__(
        self,
        job_id: str,
        attempt: int,
        replicas: Mapping[str, str],
        *,
        num_steps: int,
        start_step: int,
        step_seconds: float,
        checkpoint_steps: int | None,
        failure: Failure | None,
        calls: ReplicaCalls,
        emit: Callable[[ReplicaEvent], None],
        write_log: Callable[[str, str], None],
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
        report_interval: float,
    ) -> None:
        """`replicas`: name -> the node it "runs" on."""
        self.job_id = job_id
        self.attempt = attempt
        self.alive = set(replicas)
        self.num_steps = num_steps
        self.start_step = self.checkpoint_step = min(start_step, num_steps)
        self.step_seconds = step_seconds
        self.checkpoint_steps = checkpoint_steps
        self.failure = failure
        self._calls = calls
        self._emit = emit
        self._write_log = write_log
        self._clock = clock
        self._sleep = sleep
        self._interval = report_interval
        self._reported = (-1, -1)  # (step, checkpoint step) last written
        for name, node in replicas.items():
            write_log(name, f"attempt {attempt}: {name} started on {node} (simulated)")

    # ---- exits ------------------------------------------------------------------------------

    def exit(self, replica: str, code: int, message: str) -> None:
        """End `replica` (once): its EXITED event and its log's last line."""
        if replica not in self.alive:
            return
        self.alive.discard(replica)
        self._write_log(replica, f"exit {code}: {message}")
        self._emit(
            ReplicaEvent(
                self.job_id, replica, ReplicaEventKind.EXITED,
                exit_code=code, message=message, attempt=self.attempt,
            )
        )  # fmt: skip

    def exit_all(self, code: int, message: str) -> None:
        """End every replica still alive, the chief last (it stops its peers first)."""
        for replica in sorted(self.alive, key=lambda name: name == CHIEF_REPLICA):
            self.exit(replica, code, message)

    # ---- the attempt ------------------------------------------------------------------------

    async def run(self) -> None:
        """Register every replica, wait for the job to run, then train to the end (or until
        stopped, failed or cancelled by a teardown)."""
        try:
            # The gang registers in one call: each replica is still recorded on its own (its
            # address, READY), in one request of the coordinator's group commit.
            gang = [(name, f"sim:{name}", 0) for name in sorted(self.alive)]
            running = await self._calls.register_gang(self.job_id, self.attempt, gang)
            if running or await self._running():
                await self._train()
        except ApplianceError as exc:  # the attempt is over, or the store is away for long
            # The replicas wait for their teardown, as real ones wait to be stopped.
            log.info("simulated %s attempt %d: %s", self.job_id, self.attempt, exc.message)

    async def _running(self) -> bool:
        while True:
            try:
                await self._calls.wait_running(self.job_id, self.attempt, AWAIT_RUNNING_SECONDS)
                return True
            except DeadlineExceeded:
                continue  # still starting: ask again
            except Conflict:
                return False  # ended, or another attempt runs: the teardown follows

    async def _train(self) -> None:
        began, last_report = self._clock(), self._clock()
        stop_at = self.failure.step if self.failure is not None else self.num_steps
        while True:
            now = self._clock()
            step = self._steps_done(now, began, stop_at)
            self._pass_checkpoints(step)
            if step >= stop_at:
                break
            if now - last_report >= self._interval:
                last_report = now
                if not await self._report(step):
                    return
            wake = min(last_report + self._interval, began + self._seconds(stop_at))
            # At least a microsecond: on a clock of ~1.7e9 s, a step due now can still read as
            # a hair short, and a virtual clock moves only when something sleeps.
            await self._sleep(max(wake - now, 1e-6))
        if self.failure is not None:
            if self.checkpoint_step > self._reported[1]:
                await self._report(stop_at)  # the checkpoint first: the restart resumes there
            why = f"killed by SIGKILL (simulated: {self.failure.why})"
            self.exit(self.failure.replica, EXIT_KILLED, why)
            return
        await self._report(self.num_steps, final=True)
        self.exit_all(0, f"finished {self.num_steps} steps")

    def _seconds(self, step: int) -> float:
        """Clock time from the start of the attempt to `step` done."""
        return (step - self.start_step) * self.step_seconds

    def _steps_done(self, now: float, began: float, stop_at: int) -> int:
        if self.step_seconds <= 0:
            return stop_at
        # A hair over, so that waking at began + k * step_seconds counts step k as done.
        done = self.start_step + int((now - began) / self.step_seconds + 1e-9)
        return min(done, stop_at)

    def _pass_checkpoints(self, step: int) -> None:
        """The periodic checkpoints up to `step` (none at the end: that one is the job's)."""
        every = self.checkpoint_steps
        if every and step > self.checkpoint_step:
            newest = min(step, self.num_steps - 1) // every * every
            if newest > self.checkpoint_step:
                self.checkpoint_step = newest
                self._write_log(CHIEF_REPLICA, f"checkpoint at step {newest}")

    # ---- reports ----------------------------------------------------------------------------

    async def _report(self, step: int, *, final: bool = False) -> bool:
        """Write progress (or only read the directive when nothing changed) and do what the
        coordinator says; False when it said stop (every replica then exits 0)."""
        calls, job_id, attempt = self._calls, self.job_id, self.attempt
        try:
            if (step, self.checkpoint_step) != self._reported or final:
                self._reported = (step, self.checkpoint_step)
                progress = self._progress(step)
                self._write_log(
                    CHIEF_REPLICA, f"step {step}/{self.num_steps} loss {progress.loss:.4f}"
                )
                directive: Directive = await calls.report_progress(job_id, attempt, progress)
            else:
                directive = await calls.directive(job_id, attempt)
            if directive.keep_running and directive.checkpoint_now:
                self.checkpoint_step = step
                self._reported = (step, step)
                self._write_log(
                    CHIEF_REPLICA, f"asked for a checkpoint now: checkpoint at step {step}"
                )
                progress = self._progress(step)
                directive = await calls.report_progress(job_id, attempt, progress, True)
        except Unavailable as exc:  # the store is away for now: try again at the next report
            log.warning("simulated %s: progress not reported: %s", job_id, exc.message)
            return True
        if directive.keep_running or final:
            return True
        self._write_log(CHIEF_REPLICA, f"the coordinator says stop; stopping at step {step}")
        self.exit_all(0, "told to stop")
        return False

    def _progress(self, step: int) -> Progress:
        per_second = 1.0 / self.step_seconds if self.step_seconds > 0 else 0.0
        return Progress(
            step=step,
            num_steps=self.num_steps,
            loss=simulated_loss(step, self.num_steps),
            steps_per_second=per_second,
            reported_at=self._clock(),
            checkpoint_step=self.checkpoint_step,
            resumed_from_step=self.start_step,
        )


def simulated_loss(step: int, num_steps: int) -> float:
    """A loss curve that falls from 2.3 towards 0.1 over the job, the same for every run."""
    return 0.1 + 2.2 * math.exp(-4.0 * step / max(num_steps, 1))
