"""A real coordinator per test module and an httpx client on its HTTP port.

`rest` has the default pool, so jobs run (real replica processes); `parked` has every CS-2
system in maintenance, so submitted jobs stay QUEUED (pagination, fuzzing, error paths).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from appliance.config import Settings
from appliance.store.engine import make_engine, migrate
from appliance.store.jobs import JobStore
from appliance.store.tables import NodeRow
from tests.integration.coordinator.harness import (
    RunningCoordinator,
    kill_workers,
    wait_until,
    worker_processes,
)

SMALL_PARAMS = "model: {name: fc_mnist, hidden_sizes: [4]}\n"


class Rest:
    """A running coordinator and an HTTP client bound to its REST API."""

    def __init__(self, running: RunningCoordinator) -> None:
        self.running = running
        self.base_url = f"https://127.0.0.1:{running.coordinator.http_port}"
        self.http = httpx.Client(base_url=self.base_url, timeout=30)

    def submit(self, **fields: Any) -> dict[str, Any]:
        body = {"params": SMALL_PARAMS, "num_csx": 1, "num_steps": 2, **fields}
        response = self.http.post("/api/v1/jobs", json=body)
        assert response.status_code == 201, response.text
        job: dict[str, Any] = response.json()
        return job

    def job(self, job_id: str) -> dict[str, Any]:
        response = self.http.get(f"/api/v1/jobs/{job_id}")
        assert response.status_code == 200, response.text
        job: dict[str, Any] = response.json()
        return job

    def wait_phase(self, job_id: str, phases: set[str], timeout: float = 60) -> dict[str, Any]:
        wait_until(lambda: self.job(job_id)["phase"] in phases, timeout, f"{job_id} in {phases}")
        return self.job(job_id)

    def cancel_all(self) -> None:
        listed = self.http.get("/api/v1/jobs", params={"limit": 10_000}).json()["jobs"]
        for job in listed:
            self.http.post(f"/api/v1/jobs/{job['id']}/cancel")


def park_systems(data_dir: Path) -> None:
    """Create the store with every CS-2 system in maintenance (sync_pool keeps that state)."""
    settings = Settings(data_dir=data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.store.url)
    try:
        migrate(engine)
        JobStore(engine).sync_pool(settings.pool())
        with engine.begin() as conn:
            conn.execute(
                update(NodeRow).where(NodeRow.kind == "system").values(state="maintenance")
            )
    finally:
        engine.dispose()


def _serve(data_dir: Path) -> Iterator[Rest]:
    running = RunningCoordinator(data_dir).start()
    rest = Rest(running)
    try:
        yield rest
    finally:
        address = running.address
        try:
            rest.cancel_all()
            wait_until(lambda: not worker_processes(coordinator=address), 15, "replicas to exit")
        finally:
            leftover = [p.pid for p in worker_processes(coordinator=address)]
            kill_workers(address)
            rest.http.close()
            running.stop()
        assert not leftover, f"replica processes left behind: {leftover}"


@pytest.fixture(scope="module")
def rest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rest]:
    yield from _serve(tmp_path_factory.mktemp("rest") / "data")


@pytest.fixture(scope="module")
def parked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rest]:
    data_dir = tmp_path_factory.mktemp("parked") / "data"
    park_systems(data_dir)
    yield from _serve(data_dir)
