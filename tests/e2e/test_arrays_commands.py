"""Arrays as a user types them: the launcher submits a sweep (`--sweep ... --array %1`) and
exits, `csctl get array` shows each task's final loss once they ran on real replicas, one
after another; a hostile `--array` is refused in one line naming it, nothing submitted."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.client import ApplianceClient
from tests.integration.coordinator.harness import RunningCoordinator, kill_workers, wait_until

PARAMS = Path(__file__).resolve().parents[2] / "examples" / "params_fc_mnist.yaml"
BIN = Path(sys.executable).parent


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[RunningCoordinator]:
    running = RunningCoordinator(tmp_path / "data").start()
    try:
        yield running
    finally:
        kill_workers(running.address)
        running.stop()


def _launch(address: str, *more: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "appliance.run", "--params", str(PARAMS), "--num_csx", "1",
            "--num_steps", "4", "--server", address, *more]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def _csctl(address: str, *args: str) -> str:
    done = subprocess.run(
        [BIN / "csctl", "--server", address, *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_sweep_from_the_launcher_and_its_losses_in_csctl(
    coordinator: RunningCoordinator, tmp_path: Path
) -> None:
    out = tmp_path / "sweep"
    done = _launch(
        coordinator.address, "--model_dir", str(out),
        "--sweep", "optimizer.learning_rate=0.02,0.1", "--array", "%1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    match = re.match(r"submitted array (wsjob-[0-9a-z]+) ", done.stdout)
    assert match, done.stdout
    array_id = match.group(1)

    def ended() -> bool:
        tasks = json.loads(_csctl(coordinator.address, "get", "array", array_id, "-o", "json"))
        return all(t["phase"] == "SUCCEEDED" for t in tasks["tasks"])

    wait_until(ended, 120, "both tasks of the sweep to succeed")
    table = _csctl(coordinator.address, "get", "array", array_id, "--sort", "loss").splitlines()
    assert table[0].endswith("2 tasks, at most 1 at once")
    rows = [line.split() for line in table[2:]]
    assert {row[2] for row in rows} == {
        "optimizer.learning_rate=0.02",
        "optimizer.learning_rate=0.1",
    }
    assert all(float(row[5]) > 0 and row[4] == "4" for row in rows)
    assert sorted(float(row[5]) for row in rows) == [float(row[5]) for row in rows]
    for index in (0, 1):  # each task wrote under <model_dir>/<index>
        assert (out / str(index) / "metrics.jsonl").is_file()


def test_a_hostile_array_is_refused_in_one_line(coordinator: RunningCoordinator) -> None:
    done = _launch(coordinator.address, "--array", "0-1000000")
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "array" in lines[0] and "1000000" in lines[0], done.stderr
    with ApplianceClient(coordinator.address) as client:
        assert client.list_jobs(all=True) == []
