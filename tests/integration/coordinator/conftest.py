from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.client import ApplianceClient
from tests.integration.coordinator.harness import (
    RunningCoordinator,
    kill_workers,
    wait_until,
    worker_processes,
)

PARAMS = Path(__file__).resolve().parents[3] / "examples" / "params_fc_mnist.yaml"


@pytest.fixture
def params_file() -> Path:
    return PARAMS


@pytest.fixture
def coordinator_database() -> str:
    """The store the coordinator uses: "" is SQLite in its data dir. Modules that must run
    against every store override this with `store_url` (SQLite file and PostgreSQL)."""
    return ""


@pytest.fixture
def coordinator(tmp_path: Path, coordinator_database: str) -> Iterator[RunningCoordinator]:
    running = RunningCoordinator(tmp_path / "data", database_url=coordinator_database).start()
    try:
        yield running
    finally:
        address = running.address
        try:
            # Every test ends with its jobs terminal, so the coordinator must reap every replica.
            wait_until(lambda: not worker_processes(coordinator=address), 15, "replicas to exit")
        finally:
            leftover = [p.pid for p in worker_processes(coordinator=address)]
            kill_workers(address)
            running.stop()
        assert not leftover, f"replica processes left behind: {leftover}"


@pytest.fixture
def client(coordinator: RunningCoordinator) -> Iterator[ApplianceClient]:
    with ApplianceClient(coordinator.address) as c:
        yield c
