"""Replicas that exist only in the coordinator's memory (APPLIANCE_BACKEND=sim).

No process, no pod: `launch` "starts" every replica at once (a STARTED event each), and a task
per attempt registers them and trains the job on the injected clock (training.py). They make
the calls a real replica makes over gRPC in process, through `ReplicaCalls`, so a 2,048-system
appliance runs on a laptop and a zero-step job costs what the control plane does.

Invariants:
- At most one attempt of a job is alive at a time; a launch of the attempt that is alive does
  nothing (idempotent), a launch of a later one first tears down what is left of the earlier.
- Replicas die with the coordinator's process: `adopt` after a restart finds none, and the
  reconciler treats the jobs that held them as lost (retried as its restart policy says).
- The job's step time is its label appliance.io/sim-step-seconds, else the backend's; the label
  is checked at submit (domain/spec.py), so a bad one here fails the launch naming it. An
  elastic job's is that on its most systems, longer in proportion on fewer (domain/elastic.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence

from appliance.backends.base import (
    OptionalParts,
    ReplicaEvent,
    ReplicaEventKind,
    no_identity,
    no_secrets,
)
from appliance.backends.sim.calls import ReplicaCalls
from appliance.backends.sim.failures import FailurePlan
from appliance.backends.sim.logs import JobLogs
from appliance.backends.sim.training import EXIT_TERMINATED, SimulatedAttempt
from appliance.domain.bounded_yaml import load_bounded
from appliance.domain.errors import InvalidSpec
from appliance.domain.job import Job, Replica
from appliance.domain.plan import Role
from appliance.domain.spec import JobSpec, sim_step_seconds

log = logging.getLogger(__name__)


class SimBackend(OptionalParts):
    writes_model_dirs = False

    def __init__(
        self,
        calls: ReplicaCalls,
        *,
        step_seconds: float = 0.01,
        failures: FailurePlan | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        report_interval: float = 0.5,
    ) -> None:
        """`calls`: the coordinator's replica calls (its ReplicaService); `clock` and `sleep`
        the time the replicas train on; `report_interval`: the least clock time between two
        progress writes of a chief."""
        # Unused (no replica dials anything), kept for the protocol.
        self.coordinator_address = ""
        self.replica_secrets: Callable[[str, int], Mapping[str, str]] = no_secrets
        self.replica_identity: Callable[[str, int, str], Mapping[str, str]] = no_identity
        self.calls = calls
        self.step_seconds = step_seconds
        self.simulated_step_seconds: float | None = step_seconds
        self.failures = failures or FailurePlan()
        self.clock = clock
        self.sleep = sleep
        self.report_interval = report_interval
        self.logs = JobLogs()
        self._attempts: dict[str, SimulatedAttempt] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._events: asyncio.Queue[ReplicaEvent] = asyncio.Queue()

    async def launch(self, job: Job, replicas: Sequence[Replica]) -> None:
        alive = self._attempts.get(job.id)
        if alive is not None and alive.alive:
            if alive.attempt == job.attempt:
                return
            await self.teardown(job.id)
        try:
            step_seconds = sim_step_seconds(job.spec.labels)
        except InvalidSpec as exc:
            raise ValueError(exc.message) from None
        names = [r.name for r in replicas]
        start = min(job.progress.checkpoint_step, job.spec.num_steps)
        attempt = SimulatedAttempt(
            job.id,
            job.attempt,
            {r.name: r.node for r in replicas},
            num_steps=job.spec.num_steps,
            start_step=start,
            step_seconds=(self.step_seconds if step_seconds is None else step_seconds)
            * _slower(job, replicas),
            checkpoint_steps=checkpoint_steps(job.spec),
            failure=self.failures.first_failure(
                job.id, job.attempt, names, start, job.spec.num_steps
            ),
            calls=self.calls,
            emit=self._events.put_nowait,
            write_log=lambda replica, line: self.logs.write(job.id, replica, line),
            clock=self.clock,
            sleep=self.sleep,
            report_interval=self.report_interval,
        )
        self._attempts[job.id] = attempt
        for name in names:
            self._events.put_nowait(
                ReplicaEvent(job.id, name, ReplicaEventKind.STARTED, attempt=job.attempt)
            )
        task = asyncio.get_running_loop().create_task(attempt.run())
        self._tasks[job.id] = task
        task.add_done_callback(lambda done: self._forget(job.id, attempt, done))

    def _forget(self, job_id: str, attempt: SimulatedAttempt, task: asyncio.Task[None]) -> None:
        """The attempt's task ended: drop it once none of its replicas lives on."""
        if not task.cancelled() and task.exception() is not None:
            log.error("simulated %s failed", job_id, exc_info=task.exception())
        if self._tasks.get(job_id) is task:
            del self._tasks[job_id]
        if not attempt.alive and self._attempts.get(job_id) is attempt:
            del self._attempts[job_id]

    async def observe(self) -> AsyncIterator[ReplicaEvent]:
        while True:
            yield await self._events.get()

    async def teardown(self, job_id: str, *, failed: bool = False) -> None:
        """Stop the attempt's loop; every replica still alive exits 143 (SIGTERM)."""
        task = self._tasks.pop(job_id, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        attempt = self._attempts.pop(job_id, None)
        if attempt is not None:
            attempt.exit_all(EXIT_TERMINATED, "killed by SIGTERM")

    async def adopt(self) -> dict[str, set[str]]:
        """What this backend runs (after a restart of the coordinator: nothing, as its
        replicas died with the process)."""
        return {job_id: set(a.alive) for job_id, a in self._attempts.items() if a.alive}

    def exit_codes(self, job_id: str) -> dict[str, int]:
        return {}  # no replica outlives the process, so none ended unwatched

    async def log_tail(self, job_id: str, replica: str, lines: int) -> str:
        found = self.logs.get(job_id, replica)
        return found.tail(lines) if found is not None else ""

    async def read_log(self, job_id: str, replica: str, offset: int) -> tuple[str, int]:
        found = self.logs.get(job_id, replica)
        return found.read(offset) if found is not None else ("", offset)

    def health(self) -> str | None:
        return None  # nothing it needs can be down

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()


def checkpoint_steps(spec: JobSpec) -> int | None:
    """The job's checkpoint interval (runconfig.checkpoint_steps), None without one."""
    return _checkpoint_steps(spec.params_yaml)


@functools.lru_cache(maxsize=256)
def _checkpoint_steps(params_yaml: str) -> int | None:
    """Parsed once per params text: the jobs of a sweep of thousands mostly share a few."""
    runconfig = load_bounded(params_yaml, "params").get("runconfig") or {}
    every = runconfig.get("checkpoint_steps") if isinstance(runconfig, dict) else None
    return every if isinstance(every, int) and every > 0 else None


def _slower(job: Job, replicas: Sequence[Replica]) -> float:
    """How much longer an elastic job's step takes on fewer CS-2s than its most (the same
    work shared by fewer: the step time asked of the simulation is on `num_csx`); 1 else."""
    if not job.spec.num_csx_min:
        return 1.0
    systems = sum(1 for r in replicas if r.role is Role.CS2) or job.systems_running
    return job.spec.num_csx / systems
