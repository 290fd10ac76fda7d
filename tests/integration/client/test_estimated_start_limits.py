"""Estimated starts bounded by time limits, on the simulated backend: a running job whose steps
left would take 100 s but whose limit ends in 8 gives its systems back by then at the latest,
and the job waiting for them is estimated to start then."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.client import ApplianceClient
from appliance.domain.phases import Phase
from tests.integration.client.conftest import Csctl
from tests.integration.coordinator.harness import RunningCoordinator, serving, wait_until

STEP = 0.05  # seconds a simulated step takes


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[RunningCoordinator]:
    with serving(tmp_path / "data", backend="sim", sim_step_seconds=STEP) as running:
        yield running


def test_a_running_jobs_time_limit_bounds_the_estimates(
    sim: RunningCoordinator, params_file: Path
) -> None:
    with ApplianceClient(sim.address, detach=True) as client:
        long = client.submit(params=params_file, num_csx=4, num_steps=2000, time_limit="0:08")
        wait_until(lambda: long.status.progress.steps_per_second > 0, 30, "long to run")
        waiting = client.submit(params=params_file, num_csx=1, num_steps=10)
        ends = client.get_job(long.id).started_at + 8

        def estimate() -> float:
            return client.get_job(waiting.id).estimated_start

        wait_until(lambda: abs(estimate() - ends) < 1.0, 10, "an estimate by the limit")
        assert client.get_job(waiting.id).phase is Phase.QUEUED
        long.cancel()
        waiting.cancel()


def test_csctl_sets_and_shows_a_queues_time_limits(
    sim: RunningCoordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CSCTL_SERVER", raising=False)
    csctl = Csctl(sim.address)
    done = csctl("queue", "set", "default", "--default-time", "30", "--max-time", "1-00")
    assert done.exit_code == 0, done.output
    table = csctl("get", "queues").stdout
    header, *rows = table.splitlines()
    assert header.split()[-2:] == ["DEFAULT-TIME", "MAX-TIME"]
    (row,) = [r for r in rows if r.startswith("default ")]
    assert row.split()[-2:] == ["00:30:00", "1-00:00:00"]
    refused = csctl("queue", "set", "default", "--max-time", "-5")
    assert refused.exit_code != 0
    (line,) = [text for text in refused.output.splitlines() if text.strip()]
    assert "max_time_limit" in line and "Traceback" not in refused.output
    assert csctl("get", "queues").stdout == table  # nothing changed
    over = csctl("queue", "set", "default", "--max-time", "10")  # below the default
    assert over.exit_code != 0 and "default_time_limit" in over.output
