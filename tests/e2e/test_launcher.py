"""`python -m appliance.run` as a real process against a real coordinator."""

from __future__ import annotations

import json
import os
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
OUTAGE_SECONDS = 10


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


def test_train_and_eval_ends_with_the_evaluation(
    coordinator: RunningCoordinator, tmp_path: Path
) -> None:
    argv = _launcher(coordinator.address, tmp_path / "out", 10)
    argv[argv.index("train")] = "train_and_eval"
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stderr
    last = done.stdout.splitlines()[-1]
    match = re.search(
        r"SUCCEEDED \(step 10/10  loss \S+  .*eval loss (\S+)  accuracy (\S+)%"
        r"  over 128 samples\)",  # eval_input's 4 batches of 32
        last,
    )
    assert match, last
    written = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert match.group(1) == f"{written['eval_loss']:.4f}"
    assert match.group(2) == f"{100 * written['eval_accuracy']:.1f}"


def test_output_cut_short_by_its_reader_ends_quietly(
    coordinator: RunningCoordinator, tmp_path: Path
) -> None:
    """`| head -1`: the launcher stops when its reader goes away, with no traceback. Here the
    reader is gone before the first line: a pipe whose read end is already closed."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [*_launcher(coordinator.address, tmp_path / "out", 10), "--detach"],
            stdout=write, stderr=subprocess.PIPE, text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


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


def test_an_attached_launcher_rides_out_a_coordinator_restart(tmp_path: Path) -> None:
    """The README's "things to try" as a new user tried it: the coordinator stopped and
    started again under a launcher following its job. The launcher used to give up after
    ~6 s, and the adopted job was cancelled 60 s later, its lease lapsed."""
    data_dir = tmp_path / "data"
    first = RunningCoordinator(data_dir).start()
    address, port = first.address, first.coordinator.grpc_port
    second: RunningCoordinator | None = None
    proc = subprocess.Popen(
        _launcher(address, tmp_path / "out", 3_000),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        match = re.match(r"submitted (wsjob-\w+)", proc.stdout.readline())
        assert match
        job_id = match.group(1)
        with ApplianceClient(address) as client:
            wait_until(lambda: client.get_job(job_id).progress.step >= 1, 60, "the job to run")
        first.stop()  # replicas go on; the launcher's stream breaks
        # The outage is what is under test, not something to wait for: longer than the ~6 s
        # of retries the launcher used to give up after, far shorter than the 60 s lease.
        time.sleep(OUTAGE_SECONDS)
        second = RunningCoordinator(data_dir, grpc_port=port).start()
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, out + err
        assert f"the coordinator at {address} is unreachable" in out
        assert f"is back; following {job_id} again" in out
        assert f"{job_id} SUCCEEDED (step 3000/3000" in out
        with ApplianceClient(address) as client:
            assert client.get_job(job_id).phase is Phase.SUCCEEDED
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_workers(address)
        (second or first).stop()
