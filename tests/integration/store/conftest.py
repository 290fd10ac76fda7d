"""A migrated JobStore on every backend (`store_url` is parametrized: sqlite, postgres)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from appliance.domain.inventory import default_pool
from appliance.store.engine import make_engine, migrate
from appliance.store.jobs import JobStore


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    engine = make_engine(store_url)
    migrate(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def store(engine: Engine) -> JobStore:
    """The default pool: cs2-01..04, memx-01..04 (16 GiB), swarmx-01..02 (4 ports)."""
    store = JobStore(engine)
    store.sync_pool(default_pool())
    return store
