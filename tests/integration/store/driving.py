"""Making and driving jobs in the store under test: what the JobStore contract tests share."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from appliance.domain.backlog import Placement
from appliance.domain.inventory import NodeUsage, default_pool
from appliance.domain.job import Job, JobEvent
from appliance.domain.phases import Outcome, Phase
from appliance.domain.plan import plan_replicas
from appliance.domain.queues import validate_queue
from appliance.domain.spec import JobSpec, Mode, Priority, validate_spec
from appliance.scheduler.admission import admit
from appliance.store.jobs import JobStore, NewJob

PARAMS = "model:\n  name: fc_mnist\n  hidden_sizes: [64]\noptimizer:\n  optimizer_type: adam\n"
T0 = 1_700_000_000.125
# The forward chain that brings a new (QUEUED) job to each phase.
PATH_TO: dict[Phase, tuple[Phase, ...]] = {
    Phase.QUEUED: (),
    Phase.SCHEDULED: (Phase.SCHEDULED,),
    Phase.INITIALIZING: (Phase.SCHEDULED, Phase.INITIALIZING),
    Phase.RUNNING: (Phase.SCHEDULED, Phase.INITIALIZING, Phase.RUNNING),
    Phase.SUCCEEDED: (Phase.SCHEDULED, Phase.INITIALIZING, Phase.RUNNING, Phase.SUCCEEDED),
    Phase.FAILED: (Phase.FAILED,),
    Phase.CANCELLED: (Phase.CANCELLED,),
    Phase.TIMEOUT: (Phase.SCHEDULED, Phase.INITIALIZING, Phase.RUNNING, Phase.TIMEOUT),
}
PHASE_ORDER = list(Phase)


def in_table_order(phases: Iterable[Phase]) -> list[Phase]:
    return sorted(phases, key=PHASE_ORDER.index)


T = TypeVar("T")


# ---- helpers ----------------------------------------------------------------------------------


def make_spec(
    *,
    num_csx: int = 1,
    labels: Mapping[str, str] | None = None,
    priority: Priority = Priority.P2,
    mode: Mode = Mode.TRAIN,
    model_dir: str = "",
) -> JobSpec:
    return validate_spec(
        params_yaml=PARAMS,
        num_csx=num_csx,
        num_steps=100,
        mode=mode,
        labels=labels,
        priority=priority,
        model_dir=model_dir,
    )


def submit(
    store: JobStore, job_id: str, *, now: float = T0, user: str = "alice", **spec: Any
) -> Job:
    job_spec = make_spec(**spec)
    plan = plan_replicas(job_spec, default_pool())
    return store.create_jobs([NewJob(job_id, user, job_spec, plan)], now)[0]


def drive(store: JobStore, job_id: str, phase: Phase, now: float = T0 + 1) -> None:
    """Walk a QUEUED job along the table to `phase`."""
    for step in PATH_TO[phase]:
        change = store.set_phase(job_id, step, f"to {step}", now)
        assert change.outcome is Outcome.APPLIED, (job_id, step, change)


def usage(store: JobStore) -> dict[str, int]:
    """Used amount per node, only for nodes something is held on."""
    return {u.node.name: u.used for u in store.pool_usage() if u.used}


def placements_for(store: JobStore, job_id: str) -> tuple[Placement, ...]:
    """What admission decides for `job_id` on the stored queue and pool."""
    decisions = {d.job_id: d for d in admit(store.queued_jobs(), store.pool_usage()).admitted}
    return decisions[job_id].placements


def snapshot(store: JobStore, job_id: str) -> tuple[Job, list[JobEvent], list[NodeUsage]]:
    return store.get_job(job_id), store.events(job_id), store.pool_usage()


def run_together(count: int, call: Callable[[int], T]) -> list[T]:
    """Run call(0..count-1) on `count` threads released at once by a barrier."""
    barrier = threading.Barrier(count, timeout=30)
    results: list[T | None] = [None] * count
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            barrier.wait()
            results[index] = call(index)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]


def ids(jobs: Sequence[Job]) -> list[str]:
    return [j.id for j in jobs]


def define_queues(store: JobStore, *names: str) -> None:
    """Queues of no quota (they borrow), so jobs may be submitted to them."""
    for name in names:
        spec = validate_queue(name=name)
        store.put_queue(name, lambda _current, spec=spec: spec, lambda _queues: None)
