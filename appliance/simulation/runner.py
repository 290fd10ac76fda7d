"""`appliance simulate`: the real scheduler, reconciler and store (a temporary SQLite file) with
the simulated backend, on a virtual clock, over a workload, as fast as the CPU allows.

Time is the event loop's (looptime): when nothing is ready to run, the clock jumps to the next
timer instead of waiting for it, so an hour of jobs takes what their control-plane work takes.
Nothing may wait on a thread meanwhile (the clock would run on while it waits): the store's
calls, and the submits' model-dir placement, run inline on the loop (InlineExecutor). The parts
are wired by the coordinator's composition root, and jobs are submitted through the same use
case as the doors' (JobService.submit), those due together concurrently: one transaction.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import math
import statistics
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import looptime

from appliance.composition import Parts, Runtime, wire
from appliance.config import Settings
from appliance.domain.inventory import NodeKind
from appliance.domain.job import Job
from appliance.domain.phases import TERMINAL
from appliance.domain.spec import SIM_STEP_SECONDS_LABEL, JobSpec, validate_spec
from appliance.domain.time_limits import format_time_limit
from appliance.simulation.workload import SimJob

EPOCH = 1_700_000_000.0  # what the virtual clock reads at the start (stored times are real)
PARAMS = "model: {name: fc_mnist, hidden_sizes: [64]}\nrunconfig: {checkpoint_steps: %d}\n"
STEP_SECONDS = 60.0  # a simulated step; a job's duration sets its number of steps
# The periodic passes and sweeps (both also run on every change that concerns them): leases,
# timeouts and node states are checked this often on the virtual clock.
PASS_SECONDS = 300.0
# All submitted, nothing running and the queue unchanged this long: the simulation ends, and
# the jobs left say QUEUED (with why, as the scheduler says it).
STALL_SECONDS = 86400.0
SWEEP_SECONDS = 60.0


@dataclasses.dataclass(frozen=True)
class Sample:
    at: float  # seconds since the start
    queued: int
    systems_in_use: int


@dataclasses.dataclass(frozen=True)
class Outcome:
    """Where the simulation ended: every job as the store has it, and the samples taken."""

    jobs: list[tuple[SimJob, Job]]
    samples: list[Sample]
    systems: int
    memoryx: int = 0
    swarmx: int = 0


class InlineExecutor(concurrent.futures.Executor):
    """Runs each call at once on the caller's thread (the virtual clock's loop)."""

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the awaiting caller, as a thread would
            future.set_exception(exc)
        return future


def simulate(
    workload: Sequence[SimJob],
    settings: Settings,
    sample_every: float,
    reservations: Sequence[Mapping[str, Any]] = (),
) -> Outcome:
    """Run the workload to its end on a virtual clock; return every job and the samples.
    `reservations`: booked before the first job (their fields as REST takes them; times
    from EPOCH)."""
    loop = looptime.new_event_loop(start=0.0)
    try:
        return loop.run_until_complete(
            _simulate(list(workload), settings, sample_every, reservations)
        )
    finally:
        loop.close()


async def _simulate(
    workload: list[SimJob],
    settings: Settings,
    sample_every: float,
    reservations: Sequence[Mapping[str, Any]] = (),
) -> Outcome:
    loop = asyncio.get_running_loop()
    # Progress writes one every ~20% of the workload's typical job, at most 10 minutes apart;
    # the chief hears a preemption's checkpoint request at its next one, so the grace covers two.
    report = min(600.0, max(1.0, statistics.median(j.duration for j in workload) / 5))
    with tempfile.TemporaryDirectory(prefix="appliance-simulate-") as work:
        settings = settings.model_copy(
            update={
                "data_dir": Path(work),
                "database_url": "",
                "backend": "sim",
                "sim_step_seconds": STEP_SECONDS,
                "sim_failure_rate": 0.0,
                "sim_fail_at": "",
                "scheduler_interval": PASS_SECONDS,
                "preemption_grace_seconds": max(settings.preemption_grace_seconds, 2 * report),
                "time_limit_grace_seconds": max(settings.time_limit_grace_seconds, 2 * report),
            }
        )
        runtime = Runtime(
            clock=lambda: EPOCH + loop.time(),
            executor=InlineExecutor(),  # type: ignore[arg-type]
            blocking=_inline,
            sweep_interval=SWEEP_SECONDS,
            report_interval=report,
            serving=False,
        )
        parts = await wire(settings, runtime)
        try:
            pool = parts.ctx.store.pool()
            for fields in reservations:
                await parts.uses.reservations.create(fields, by=None)
            tasks = [loop.create_task(run) for run in parts.loops()]
            samples: list[Sample] = []
            try:
                ids = await _submit_and_sample(parts, workload, sample_every, samples)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            store = parts.ctx.store
            jobs = [
                (sim, store.get_job(job_id)) for sim, job_id in zip(workload, ids, strict=True)
            ]
            count = {kind: sum(1 for n in pool if n.kind is kind) for kind in NodeKind}
            return Outcome(
                jobs,
                samples,
                count[NodeKind.SYSTEM],
                count[NodeKind.MEMORYX],
                count[NodeKind.SWARMX],
            )
        finally:
            await parts.close()


async def _inline(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """A blocking call run at once on the loop (a thread would let the virtual clock run on)."""
    return fn(*args, **kwargs)


async def _submit_and_sample(
    parts: Parts, workload: list[SimJob], every: float, samples: list[Sample]
) -> list[str]:
    """Submit each job at its time; sample the queue and the systems in use every `every`
    seconds; return once every job has ended."""
    loop = asyncio.get_running_loop()
    ctx, jobs = parts.ctx, parts.uses.jobs
    ids = [""] * len(workload)
    order = sorted(range(len(workload)), key=lambda i: workload[i].submit_at)
    submitted = 0
    next_sample = 0.0
    while True:
        now = loop.time()
        due = []
        while submitted < len(order) and workload[order[submitted]].submit_at <= now:
            due.append(order[submitted])
            submitted += 1
        if due:  # submitted together: group-committed, one transaction
            made = await asyncio.gather(
                *(
                    jobs.submit(_spec(workload[i]), workload[i].user, refuse_never_runs=False)
                    for i in due
                )
            )
            for index, job in zip(due, made, strict=True):
                ids[index] = job.id
        if now >= next_sample:
            await ctx.backlog.current()
            usage = ctx.store.pool_usage()
            used = sum(u.used for u in usage if u.node.kind is NodeKind.SYSTEM)
            samples.append(Sample(now, len(ctx.backlog), used))
            next_sample = now + every
            if submitted == len(order) and _all_ended(parts):
                return ids
            if submitted == len(order) and _stalled(samples):
                return ids  # what is left can never run (e.g. a queue's quota is too small)
        wake = next_sample
        if submitted < len(order):
            wake = min(wake, workload[order[submitted]].submit_at)
        # A millisecond at least: the virtual clock moves in steps of a microsecond, so a
        # shorter sleep would not move it.
        await asyncio.sleep(max(1e-3, wake - loop.time()))


def _stalled(samples: list[Sample]) -> bool:
    """Nothing ran and the queue did not move for STALL_SECONDS: the rest waits forever."""
    last = samples[-1]
    if last.systems_in_use or not last.queued:
        return False
    for sample in reversed(samples):
        if sample.systems_in_use or sample.queued != last.queued:
            return last.at - sample.at >= STALL_SECONDS
    return last.at - samples[0].at >= STALL_SECONDS


def _all_ended(parts: Parts) -> bool:
    counts = parts.ctx.store.count_by_phase()
    return not any(count for phase, count in counts.items() if phase not in TERMINAL)


def _spec(job: SimJob) -> JobSpec:
    """The job as its user would submit it: its duration as steps of the simulated backend."""
    steps = max(1, math.ceil(job.duration / STEP_SECONDS))
    step = job.duration / steps
    label = f"{step:.6f}".rstrip("0").rstrip(".") or "0"
    return validate_spec(
        params_yaml=PARAMS % max(1, steps // 10),
        num_csx=job.num_csx,
        num_csx_min=job.num_csx_min,
        num_steps=steps,
        priority=job.priority,
        queue=job.queue,
        labels={SIM_STEP_SECONDS_LABEL: label},
        time_limit=format_time_limit(math.ceil(job.time_limit)) if job.time_limit else "",
    )
