"""Estimated starts of queued jobs (like `squeue --start`) on the simulated backend, whose jobs
run on the clock at a known rate: GetJob, ListJobs (csctl --show-pending, get job) and REST."""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from appliance.client import ApplianceClient
from appliance.domain.inventory import NodeState
from appliance.domain.phases import Phase
from tests.integration.client.conftest import Csctl
from tests.integration.coordinator.harness import RunningCoordinator, serving, wait_until

STEP = 0.05  # seconds a simulated step takes


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[RunningCoordinator]:
    with serving(tmp_path / "data", backend="sim", sim_step_seconds=STEP) as running:
        yield running


def test_queued_jobs_are_estimated_from_the_running_jobs_steps_left(
    sim: RunningCoordinator, params_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CSCTL_SERVER", raising=False)
    sim.coordinator.ctx.store.set_node_state(["cs2-04"], NodeState.MAINTENANCE)  # 3 usable
    with ApplianceClient(sim.address, detach=True) as client:

        def submit(num_csx: int, num_steps: int) -> str:
            return client.submit(params=params_file, num_csx=num_csx, num_steps=num_steps).id

        long, short = submit(2, 400), submit(1, 200)  # 20 s and 10 s
        wait_until(
            lambda: all(client.get_job(j).progress.steps_per_second > 0 for j in (long, short)),
            30, "both to report progress",
        )  # fmt: skip
        # Far enough into the run that the steps done count (60 steps: 3 s).
        wait_until(lambda: client.get_job(long).progress.step >= 60, 30, "60 steps of long")
        three, one, four = submit(3, 100), submit(1, 20), submit(4, 10)
        long_ends = client.get_job(long).started_at + 400 * STEP
        short_ends = client.get_job(short).started_at + 200 * STEP

        def estimate(job_id: str) -> float:
            return client.get_job(job_id).estimated_start

        # `three` waits for both (all 3 usable systems); `one` backfills when `short` ends.
        wait_until(lambda: abs(estimate(three) - long_ends) < 1.0, 10, "three's estimate")
        assert abs(estimate(one) - short_ends) < 1.0
        assert estimate(four) == 0.0  # 4 systems, 3 usable: no estimate
        assert client.get_job(three).phase is Phase.QUEUED

        listed = {job.id: job for job in client.list_jobs()}  # StreamJobs
        paged = {job.id: job for job in client.list_jobs(limit=10)}  # ListJobs
        for jobs in (listed, paged):
            assert abs(jobs[three].estimated_start - long_ends) < 1.0
            assert jobs[four].estimated_start == 0.0 and jobs[long].estimated_start == 0.0

        csctl = Csctl(sim.address)
        table = csctl("get", "jobs", "--show-pending").stdout.splitlines()
        column = table[0].index("START(EST)")
        start = {row.split()[0]: row[column:].strip() for row in table[1:]}
        left = long_ends - time.time()
        assert start[three].startswith("~") and abs(int(start[three][1:-1]) - left) <= 2
        assert (start[four], start[long]) == ("-", "-")
        detail = csctl("get", "job", three, "-o", "table").stdout
        assert "ESTIMATED START: ~" in detail and "from now (an estimate)" in detail
        document = yaml.safe_load(csctl("get", "job", three, "-o", "yaml").stdout)
        assert document["estimated_start"].endswith("Z")

        http = f"https://127.0.0.1:{sim.coordinator.http_port}/api/v1/jobs"
        rest = httpx.get(f"{http}/{three}", timeout=10).json()
        assert abs(_unix(rest["estimated_start"]) - long_ends) < 1.0  # RFC 3339, to the second
        rest_listed = {j["id"]: j for j in httpx.get(http, timeout=10).json()["jobs"]}
        assert abs(_unix(rest_listed[one]["estimated_start"]) - short_ends) < 1.0
        assert rest_listed[four]["estimated_start"] is None

        for job_id in (long, short, three, one, four):
            client.cancel_job(job_id)


def _unix(moment: str) -> float:
    return datetime.datetime.fromisoformat(moment).timestamp()
