from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.client import ApplianceClient
from tests.integration.coordinator.harness import RunningCoordinator, serving

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
    with serving(tmp_path / "data", database_url=coordinator_database) as running:
        yield running


@pytest.fixture
def client(coordinator: RunningCoordinator) -> Iterator[ApplianceClient]:
    with ApplianceClient(coordinator.address) as c:
        yield c
