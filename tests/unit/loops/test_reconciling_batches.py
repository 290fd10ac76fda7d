"""The reconciler handles a job's replica events together (starts in one write, exits in one
write up to the first that may end the job) and must end every job exactly as handling the
same events one at a time does. Twin jobs on one real SQLite store, random event sequences."""

from __future__ import annotations

import random
from pathlib import Path

from appliance.backends.base import ReplicaEvent, ReplicaEventKind
from appliance.domain.restarts import EXIT_PEER_FAILED
from appliance.domain.spec import validate_spec
from appliance.loops.reconciling import Reconciler
from appliance.loops.scheduling import SchedulerLoop
from appliance.services.context import Context
from appliance.services.replicas import ReplicaService
from tests.unit.harness import NOW, PARAMS, create, new_jobs, store_context
from tests.unit.loops.test_reconciling import RecordingBackend

TOGETHER, ALONE = "wsjob-together00000", "wsjob-alone000000000"
CODES = [0, 0, 0, 0, 1, 137, 143, EXIT_PEER_FAILED, None]
SCENARIOS = 30


def _events(rng: random.Random, names: list[str]) -> list[tuple[str, str, int | None]]:
    """Some replicas' ends in a random order, starts of others mixed in: (kind, name, code)."""
    ending = rng.sample(names, rng.randint(1, len(names)))
    events: list[tuple[str, str, int | None]] = []
    for name in ending:
        if rng.random() < 0.2:
            events.append(("started", rng.choice(names), None))
        events.append(("exited", name, rng.choice(CODES)))
    return events


def _replica_event(job_id: str, kind: str, name: str, code: int | None) -> ReplicaEvent:
    if kind == "started":
        return ReplicaEvent(job_id, name, ReplicaEventKind.STARTED, pid=7, attempt=1)
    message = "node gone" if code is None else f"ended with {code}"
    return ReplicaEvent(
        job_id, name, ReplicaEventKind.EXITED,
        exit_code=code, message=message, attempt=1, lost=code is None,
    )  # fmt: skip


def _outcome(ctx: Context, job_id: str) -> object:
    job = ctx.store.get_job(job_id)
    replicas = [(r.name, r.phase, r.exit_code, r.message, r.log_tail) for r in job.replicas]
    phases = [e.to_phase for e in ctx.store.events(job_id)]
    return job.phase, job.reason, job.restarts, replicas, phases


async def _both_running(ctx: Context, reconciler: Reconciler, restarts: int) -> None:
    spec = validate_spec(params_yaml=PARAMS, num_csx=2, num_steps=5, max_restarts=restarts)
    jobs = new_jobs([TOGETHER, ALONE], num_csx=2)
    create(ctx, [j.__class__(j.job_id, j.user, spec, j.plan) for j in jobs], NOW)
    assert await SchedulerLoop(ctx).run_once() == 2
    await reconciler.sweep(timed=False)
    for job_id in (TOGETHER, ALONE):
        for replica in ctx.store.replicas(job_id):
            await reconciler.replicas.register(job_id, 1, replica.name, "127.0.0.1:2", 42)


async def test_a_jobs_events_handled_together_end_it_as_one_at_a_time_would(
    tmp_path: Path,
) -> None:
    rng = random.Random(18)
    seen_phases = set()
    for scenario in range(SCENARIOS):
        where = tmp_path / str(scenario)
        where.mkdir()
        async with store_context(where) as ctx:
            reconciler = Reconciler(ctx, RecordingBackend(), ReplicaService(ctx))
            await _both_running(ctx, reconciler, restarts=scenario % 2)
            names = [r.name for r in ctx.store.replicas(TOGETHER)]
            events = _events(rng, names)

            await reconciler.on_replica_events(
                [_replica_event(TOGETHER, *event) for event in events]
            )
            for event in events:
                await reconciler.on_replica_event(_replica_event(ALONE, *event))

            together, alone = _outcome(ctx, TOGETHER), _outcome(ctx, ALONE)
            assert together == alone, (scenario, events)
            seen_phases.add(together[0])  # type: ignore[index]
    assert len(seen_phases) >= 3  # the scenarios ended jobs in several ways
