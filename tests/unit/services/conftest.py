"""A Context over a real SQLite store in a temporary directory: the services' unit tests run
their use cases against it (the bus is our own seam and is read directly)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.domain.inventory import default_pool
from appliance.domain.plan import plan_replicas
from appliance.domain.spec import Priority, validate_spec
from appliance.services.bus import JobBus
from appliance.services.context import Context
from appliance.store.engine import make_engine, migrate
from appliance.store.jobs import JobStore, NewJob

PARAMS = "model: {name: fc_mnist, hidden_sizes: [4]}\n"
NOW = 1_700_000_000.0


def new_jobs(ids: Iterable[str], priority: Priority = Priority.P2) -> list[NewJob]:
    """Jobs of alice's that each need one CS-2 system."""
    spec = validate_spec(params_yaml=PARAMS, num_csx=1, num_steps=5, priority=priority)
    plan = plan_replicas(spec, default_pool())
    return [NewJob(job_id, "alice", spec, plan) for job_id in ids]


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[Context]:
    engine = make_engine(f"sqlite:///{tmp_path / 'jobs.db'}")
    migrate(engine)
    store = JobStore(engine)
    store.sync_pool(default_pool())
    writer = ThreadPoolExecutor(1, thread_name_prefix="test-store")
    settings = Settings(data_dir=tmp_path / "data")
    try:
        yield Context(settings, store, JobBus(), writer, clock=lambda: NOW + 1)
    finally:
        writer.shutdown(wait=True)
        engine.dispose()
