"""The README's tour as a user runs it: `appliance serve` and `csctl` as real commands."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from appliance.client import ApplianceClient
from appliance.domain.phases import Phase
from tests.e2e.conftest import Served
from tests.integration.coordinator.harness import wait_until, worker_processes

BIN = Path(sys.executable).parent
PARAMS = Path(__file__).resolve().parents[2] / "examples" / "params_fc_mnist.yaml"


@pytest.fixture
def served(serving: Served) -> str:
    """`appliance serve` on free ports; its gRPC address."""
    return serving.address


def csctl(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BIN / "csctl", "--server", address, *args], capture_output=True, text=True, timeout=60
    )


def test_killed_replica_shows_exit_code_in_csctl_yaml(served: str) -> None:
    with ApplianceClient(served) as client:
        job = client.submit(params=PARAMS, num_csx=2, num_steps=1_000_000, labels={"t": "e2e"})
        wait_until(lambda: job.status.phase is Phase.RUNNING, 60, "the job to run")

        table = csctl(served, "get", "jobs")
        assert table.returncode == 0
        header, row = table.stdout.splitlines()[:2]
        assert header.split() == [
            "NAME", "AGE", "DURATION", "PHASE", "TYPE", "PRIORITY", "CSX", "SYSTEMS", "USER",
            "LABELS",
        ]  # fmt: skip
        cells = row.split()
        assert cells[0] == job.id and cells[3] == "RUNNING" and "t=e2e" in row
        assert cells[6] == "2" and len(cells[7].split(",")) == 2  # CSX, then the systems

        cs2 = next(r for r in job.status.replicas if r.name == "cs2-0")
        os.kill(cs2.pid, signal.SIGKILL)
        wait_until(lambda: job.status.phase is Phase.FAILED, 5, "the job to fail")
        wait_until(lambda: not worker_processes(job.id), 10, "the other replicas to stop")

    shown = csctl(served, "get", "job", job.id, "-o", "yaml")
    assert shown.returncode == 0, shown.stderr
    status = yaml.safe_load(shown.stdout)
    assert status["phase"] == "FAILED"
    assert "cs2-0" in status["reason"]
    killed = next(r for r in status["replicas"] if r["name"] == "cs2-0")
    assert killed["exit_code"] == 137 and killed["phase"] == "FAILED"

    assert csctl(served, "get", "jobs").stdout.splitlines()[1:] == []  # no active job left
    listed = csctl(served, "get", "jobs", "-a", "-o", "json")
    assert [j["name"] for j in yaml.safe_load(listed.stdout)] == [job.id]


def test_csctl_errors_are_one_line(served: str) -> None:
    missing = csctl(served, "get", "job", "wsjob-000000000000")
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        "error: job wsjob-000000000000 not found; list jobs with `csctl get jobs -a`"
    )
    unreachable = csctl("127.0.0.1:1", "get", "jobs")
    assert unreachable.returncode == 1 and len(unreachable.stderr.strip().splitlines()) == 1
    assert "cannot reach the appliance at 127.0.0.1:1" in unreachable.stderr
