"""`python -m appliance.run` as a real process against a real coordinator."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.client import ApplianceClient
from appliance.domain.phases import Phase
from tests.integration.coordinator.harness import (
    RunningCoordinator,
    kill_workers,
    wait_until,
    worker_processes,
)

PARAMS = Path(__file__).resolve().parents[2] / "examples" / "params_fc_mnist.yaml"


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[RunningCoordinator]:
    running = RunningCoordinator(tmp_path / "data").start()
    try:
        yield running
    finally:
        kill_workers(running.address)
        running.stop()


def _launcher(address: str, model_dir: Path, num_steps: int) -> list[str]:
    return [sys.executable, "-m", "appliance.run", "--params", str(PARAMS), "--num_csx", "1",
            "--num_steps", str(num_steps), "--model_dir", str(model_dir), "--mode", "train",
            "--server", address]  # fmt: skip


def test_a_short_job_exits_0(coordinator: RunningCoordinator, tmp_path: Path) -> None:
    done = subprocess.run(
        [*_launcher(coordinator.address, tmp_path / "out", 10), "--job_labels", "e2e=launcher"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    match = re.match(r"submitted (wsjob-\w+)", done.stdout)
    assert match, done.stdout
    assert "RUNNING -> SUCCEEDED" in done.stdout
    assert "step 10/10" in done.stdout  # plain progress lines: stdout is not a terminal
    assert "\r" not in done.stdout
    with ApplianceClient(coordinator.address) as client:
        job = client.get_job(match.group(1))
    assert (job.phase, dict(job.spec.labels)) == (Phase.SUCCEEDED, {"e2e": "launcher"})
    assert job.spec.model_dir == str(tmp_path / "out")


def test_ctrl_c_cancels_the_job_and_leaves_no_replica(
    coordinator: RunningCoordinator, tmp_path: Path
) -> None:
    proc = subprocess.Popen(
        _launcher(coordinator.address, tmp_path / "out", 1_000_000),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        match = re.match(r"submitted (wsjob-\w+)", first)
        assert match, first
        job_id = match.group(1)
        with ApplianceClient(coordinator.address) as client:
            wait_until(lambda: client.get_job(job_id).phase is Phase.RUNNING, 60, "running")
            assert worker_processes(job_id)

            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)

            assert proc.returncode == 130, err
            assert f"{job_id} cancelled" in out
            job = client.get_job(job_id)
            assert job.phase is Phase.CANCELLED
            assert job.reason == "the launcher was interrupted"
        wait_until(lambda: not worker_processes(job_id), 15, "the replicas to exit")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_a_killed_launchers_job_is_cancelled_once_its_lease_lapses(
    coordinator: RunningCoordinator, tmp_path: Path
) -> None:
    lease = 2.0
    proc = subprocess.Popen(
        [*_launcher(coordinator.address, tmp_path / "out", 1_000_000),
         "--lease_seconds", str(lease)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    match = re.match(r"submitted (wsjob-\w+)", proc.stdout.readline())
    assert match
    job_id = match.group(1)
    with ApplianceClient(coordinator.address) as client:
        wait_until(lambda: client.get_job(job_id).phase is Phase.RUNNING, 60, "running")
        assert client.get_job(job_id).lease is not None
        killed_at = time.monotonic()
        proc.kill()  # the client process dies without a word: only its heartbeats stop
        proc.communicate(timeout=30)
        wait_until(lambda: client.get_job(job_id).phase is Phase.CANCELLED, lease + 10)
        assert time.monotonic() - killed_at <= lease + 10
        job = client.get_job(job_id)
    assert job.reason.startswith("client lease expired"), job.reason
    assert f":{proc.pid}" in job.reason  # the holder (host:pid) of the lapsed lease
    wait_until(lambda: not worker_processes(job_id), 15, "replicas to stop")
