"""A sweep end to end on a live coordinator with real local replicas: two tasks of fc_mnist
train a few steps each with their own learning rate, `csctl get array` shows each task's
final loss from its chief's metrics.jsonl (sorted by it too), and a task's replicas find its
index in their environment."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from appliance.client import ApplianceClient
from appliance.domain.phases import Phase
from csctl.cli import cli
from tests.integration.coordinator.harness import RunningCoordinator, wait_until


def test_a_sweep_trains_each_point_and_get_array_shows_the_losses(
    coordinator: RunningCoordinator,
    client: ApplianceClient,
    params_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CSCTL_SERVER", raising=False)
    sweep = {"optimizer.learning_rate": "0.01,0.2"}
    first = client.submit(params=params_file, num_csx=1, num_steps=6, sweep=sweep)
    array_id = first.array_id

    def phases() -> set[Phase]:
        return {t.phase for t in client.array(array_id).tasks}

    wait_until(lambda: phases() == {Phase.SUCCEEDED}, 120, "both tasks to succeed")
    result = CliRunner().invoke(
        cli, ["--server", coordinator.address, "get", "array", array_id, "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    tasks = json.loads(result.stdout)["tasks"]
    assert [t["overrides"] for t in tasks] == [
        {"optimizer.learning_rate": "0.01"},
        {"optimizer.learning_rate": "0.2"},
    ]
    assert all(t["step"] == 6 and t["loss"] > 0 for t in tasks), tasks
    assert tasks[0]["loss"] != tasks[1]["loss"]  # each trained with its own rate
    by_loss = CliRunner().invoke(
        cli, ["--server", coordinator.address, "get", "array", array_id, "--sort", "loss"]
    )
    assert by_loss.exit_code == 0, by_loss.output
    rows = [line.split() for line in by_loss.stdout.splitlines()[2:]]
    losses = [float(row[5]) for row in rows]
    assert losses == sorted(losses) and len(rows) == 2


def test_a_tasks_replicas_find_its_index_in_their_environment(
    client: ApplianceClient, params_file: Path
) -> None:
    task = client.submit(params=params_file, num_csx=1, num_steps=100_000, array="7")
    assert task.id == f"{task.array_id}_7"
    wait_until(lambda: task.status.phase is Phase.RUNNING, 60, "the task to run")
    chief = next(r for r in task.status.replicas if r.name == "chief-0")
    environ = psutil.Process(chief.pid).environ()
    assert environ["APPLIANCE_ARRAY_TASK_ID"] == "7"
    assert environ["APPLIANCE_ARRAY_JOB_ID"] == task.array_id
    client.cancel_job(task.array_id)
    wait_until(lambda: task.status.phase is Phase.CANCELLED, 30, "the array cancelled")
