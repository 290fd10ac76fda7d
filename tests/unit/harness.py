"""What the unit tests of the services and the loops share: a Context over a real SQLite store
in a temporary directory (the bus is our own seam and is read directly), on a clock the test
moves, and jobs to put in it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from appliance.domain.inventory import default_pool
from appliance.domain.job import Job
from appliance.domain.plan import plan_replicas
from appliance.domain.spec import Priority, validate_spec
from appliance.services.bus import JobBus
from appliance.services.context import Context
from appliance.services.jobs import JobService
from appliance.services.model_dirs import ModelDirs
from appliance.store.engine import make_engine, migrate
from appliance.store.jobs import JobStore, NewJob

PARAMS = "model: {name: fc_mnist, hidden_sizes: [4]}\n"
NOW = 1_700_000_000.0


class Clock:
    """The injected clock: time stands still until a test moves it."""

    def __init__(self, now: float = NOW + 1) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def new_jobs(
    ids: Iterable[str], priority: Priority = Priority.P2, num_csx: int = 1, **job: Any
) -> list[NewJob]:
    """Jobs of alice's, each needing `num_csx` CS-2 systems (of the default pool's four)."""
    spec = validate_spec(params_yaml=PARAMS, num_csx=num_csx, num_steps=5, priority=priority)
    plan = plan_replicas(spec, default_pool())
    return [NewJob(job_id, "alice", spec, plan, **job) for job_id in ids]


@contextlib.asynccontextmanager
async def store_context(tmp_path: Path) -> AsyncIterator[Context]:
    """A Context over a migrated SQLite store with the default pool, on a Clock."""
    engine = make_engine(f"sqlite:///{tmp_path / 'jobs.db'}")
    migrate(engine)
    store = JobStore(engine)
    store.sync_pool(default_pool())
    writer = ThreadPoolExecutor(1, thread_name_prefix="test-store")
    try:
        yield Context(store, JobBus(), writer, clock=Clock())
    finally:
        writer.shutdown(wait=True)
        engine.dispose()


def data_dir(ctx: Context) -> Path:
    """The data dir beside the store of a `store_context`."""
    database = ctx.store.engine.url.database
    assert database is not None
    return Path(database).parent / "data"


def job_service(ctx: Context) -> JobService:
    """The submit (and read, cancel...) use cases over `ctx`, model dirs in its data dir."""
    return JobService(ctx, ModelDirs(data_dir(ctx) / "model_dirs"))


def shown(ctx: Context, job_id: str) -> Job:
    """The job as the doors show it: a queued job with its position and its reason from the
    scheduler's last pass (services/backlog_view.py)."""
    return ctx.backlog.shown(ctx.store.get_job(job_id))


def create(ctx: Context, jobs: Iterable[NewJob], now: float) -> None:
    """Submit jobs straight to the store, marked in the queue view as the submit door does."""
    jobs = list(jobs)
    ctx.store.create_jobs(jobs, now)
    for job in jobs:
        ctx.backlog.mark(job.job_id)
