"""csctl against the real coordinator: queue priority, the pool, logs and log export."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import yaml

from appliance.client import ApplianceClient
from appliance.domain.phases import Phase
from tests.integration.client.conftest import Csctl, hold_queue
from tests.integration.coordinator.harness import RunningCoordinator, wait_until

REPLICAS = {"chief-0", "cs2-0", "memoryx-0", "swarmx-0"}


def _pending_column(csctl: Csctl) -> dict[str, str]:
    """NAME -> PENDING of `csctl get jobs --show-pending`."""
    result = csctl("get", "jobs", "--show-pending")
    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.splitlines()
    start, end = header.index("PENDING"), header.index("START(EST)")
    return {row.split()[0]: row[start:end].strip() for row in rows}


def test_set_priority_moves_a_queued_job_ahead(
    coordinator: RunningCoordinator, observer: ApplianceClient, csctl: Csctl, params_file: Path
) -> None:
    hold_queue(coordinator)
    first = observer.submit(params=params_file, num_csx=1, num_steps=5).id
    second = observer.submit(params=params_file, num_csx=1, num_steps=5).id
    wait_until(lambda: observer.get_job(second).queue_position == 2, 10, "queue positions")

    before = _pending_column(csctl)
    assert before[first].startswith("#1: ") and before[second].startswith("#2: ")

    moved = csctl("job", "set-priority", second, "p1")
    assert (moved.exit_code, moved.stdout) == (
        0,
        f"job {second} priority set to P1; queue position 1\n",
    )
    wait_until(lambda: "behind " + second in _pending_column(csctl)[first], 10, "re-queue")
    after = _pending_column(csctl)
    assert after[second].startswith("#1: ") and after[first].startswith("#2: ")

    systems = csctl("get", "systems")
    assert [row.split()[1] for row in systems.stdout.splitlines()[1:]] == ["maintenance"] * 4
    groups = csctl("get", "nodegroups").stdout.splitlines()
    assert groups[1].split() == ["system", "4", "0", "0", "4", "0", "0/4"]
    assert groups[2].split()[-1] == "64Gi/64Gi"

    cancelled = csctl("cancel", "job", first, second)
    assert cancelled.exit_code == 0
    assert csctl("job", "set-priority", first, "p1").exit_code == 1


def test_logs_follow_ends_with_the_job_and_log_export_zips_everything(
    coordinator: RunningCoordinator,
    observer: ApplianceClient,
    csctl: Csctl,
    params_file: Path,
    tmp_path: Path,
) -> None:
    job_id = observer.submit(params=params_file, num_csx=1, num_steps=20).id

    followed = csctl("logs", job_id, "-f")

    assert followed.exit_code == 0, followed.output
    assert observer.get_job(job_id).phase is Phase.SUCCEEDED  # -f ended because the job ended
    prefixes = {line.split("]")[0].lstrip("[") for line in followed.stdout.splitlines()}
    assert prefixes == REPLICAS
    assert "step 20/20" in followed.stdout

    target = tmp_path / "export.zip"
    exported = csctl("log-export", job_id, "-o", str(target))
    assert exported.exit_code == 0, exported.output
    with zipfile.ZipFile(target) as archive:
        names = set(archive.namelist())
        status = yaml.safe_load(archive.read(f"{job_id}/status.yaml"))
        events = json.loads(archive.read(f"{job_id}/events.json"))
        chief = archive.read(f"{job_id}/logs/chief-0.log").decode()
    assert names == {f"{job_id}/logs/{r}.log" for r in REPLICAS} | {
        f"{job_id}/status.yaml",
        f"{job_id}/events.json",
    }
    assert status["phase"] == "SUCCEEDED"
    assert {r["name"] for r in status["replicas"]} == REPLICAS
    assert [e["to_phase"] for e in events][-1] == "SUCCEEDED"
    assert "step 20/20" in chief

    events_table = csctl("events", job_id)
    assert events_table.stdout.splitlines()[-1].split()[1:3] == ["RUNNING", "SUCCEEDED"]


def test_log_export_refuses_a_job_that_has_not_finished(
    coordinator: RunningCoordinator, observer: ApplianceClient, csctl: Csctl, params_file: Path,
    tmp_path: Path,
) -> None:  # fmt: skip
    hold_queue(coordinator)
    job_id = observer.submit(params=params_file, num_csx=1, num_steps=5).id

    refused = csctl("log-export", job_id, "-o", str(tmp_path / "x.zip"))

    assert refused.exit_code == 1
    assert refused.stderr.startswith(f"error: job {job_id} is QUEUED;")
    assert not (tmp_path / "x.zip").exists()
    assert csctl("cancel", "job", job_id).exit_code == 0
