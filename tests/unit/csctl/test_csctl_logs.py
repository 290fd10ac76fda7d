"""`csctl logs`, `csctl events` and `csctl log-export`."""

from __future__ import annotations

import json
import threading
import zipfile
from pathlib import Path

import pytest
import yaml
from csctl_runner import Csctl
from fake_cluster_service import FakeCluster

from appliance.domain.phases import Phase


@pytest.fixture
def finished_job(cluster: FakeCluster) -> str:
    job_id = cluster.service.add_job(phase=Phase.RUNNING).id
    cluster.service.append_log(job_id, "chief-0", "starting", "step 10/10")
    cluster.service.append_log(job_id, "cs2-0", "ready")
    cluster.service.transition(job_id, Phase.SUCCEEDED, "all steps done")
    return job_id


def test_logs_of_every_replica_are_prefixed(csctl: Csctl, finished_job: str) -> None:
    result = csctl("logs", finished_job)

    assert (result.exit_code, result.stdout.splitlines()) == (
        0,
        ["[chief-0] starting", "[chief-0] step 10/10", "[cs2-0] ready"],
    )
    one = csctl("logs", finished_job, "--replica", "cs2-0")
    assert one.stdout == "ready\n"


def test_logs_of_an_unknown_replica_exit_1(csctl: Csctl, finished_job: str) -> None:
    result = csctl("logs", finished_job, "--replica", "cs2-9")

    assert result.exit_code == 1 and result.stderr.startswith("error: ")


def test_logs_follow_ends_when_the_job_ends(csctl: Csctl, cluster: FakeCluster) -> None:
    job_id = cluster.service.add_job(phase=Phase.RUNNING).id
    cluster.service.append_log(job_id, "chief-0", "early")

    def finish() -> None:
        cluster.service.wait_for_request("GetJobLogs")
        cluster.service.append_log(job_id, "chief-0", "late")
        cluster.service.transition(job_id, Phase.SUCCEEDED)

    driver = threading.Thread(target=finish)
    driver.start()
    result = csctl("logs", job_id, "-f")
    driver.join(10)

    assert (result.exit_code, result.stdout) == (0, "[chief-0] early\n[chief-0] late\n")


def test_events_table_and_follow(csctl: Csctl, finished_job: str) -> None:
    table = csctl("events", finished_job)
    followed = csctl("events", finished_job, "-f")

    assert table.exit_code == 0
    header, *rows = table.stdout.splitlines()
    assert header.split() == ["AGE", "FROM", "TO", "REASON"]
    assert [row.split()[1:] for row in rows] == [
        ["QUEUED", "submitted"],
        ["QUEUED", "RUNNING"],
        ["RUNNING", "SUCCEEDED", "all", "steps", "done"],
    ]
    assert followed.exit_code == 0
    assert followed.stdout.splitlines()[-1].endswith("RUNNING -> SUCCEEDED  all steps done")


def test_events_follow_prints_progress(csctl: Csctl, cluster: FakeCluster) -> None:
    job_id = cluster.service.add_job(phase=Phase.RUNNING).id

    def finish() -> None:
        cluster.service.wait_for_request("WatchJob")
        cluster.service.report_progress(job_id, 5)
        cluster.service.transition(job_id, Phase.SUCCEEDED)

    driver = threading.Thread(target=finish)
    driver.start()
    result = csctl("events", job_id, "-f")
    driver.join(10)

    assert result.exit_code == 0
    assert "step 5/10  loss 0.0000" in result.stdout


def test_log_export_zips_logs_status_and_events(
    csctl: Csctl, finished_job: str, tmp_path: Path
) -> None:
    target = tmp_path / "export.zip"

    result = csctl("log-export", finished_job, "-o", str(target))

    assert result.exit_code == 0, result.output
    assert result.stdout == f"wrote {target}: 2 replica logs, status and 3 events\n"
    with zipfile.ZipFile(target) as archive:
        names = set(archive.namelist())
        assert names == {f"{finished_job}/{name}" for name in (
            "logs/chief-0.log", "logs/cs2-0.log", "status.yaml", "events.json")}  # fmt: skip
        chief = archive.read(f"{finished_job}/logs/chief-0.log").decode()
        status = yaml.safe_load(archive.read(f"{finished_job}/status.yaml"))
        events = json.loads(archive.read(f"{finished_job}/events.json"))
    assert chief == "starting\nstep 10/10\n"
    assert (status["name"], status["phase"]) == (finished_job, "SUCCEEDED")
    assert [e["to_phase"] for e in events] == ["QUEUED", "RUNNING", "SUCCEEDED"]


def test_log_export_defaults_to_id_zip_in_the_current_directory(
    csctl: Csctl, finished_job: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    assert csctl("log-export", finished_job).exit_code == 0
    assert zipfile.is_zipfile(tmp_path / f"{finished_job}.zip")


def test_log_export_refuses_an_active_job(
    csctl: Csctl, cluster: FakeCluster, tmp_path: Path
) -> None:
    job_id = cluster.service.add_job(phase=Phase.RUNNING).id

    result = csctl("log-export", job_id, "-o", str(tmp_path / "x.zip"))

    assert result.exit_code == 1
    assert result.stderr == (
        f"error: job {job_id} is RUNNING; export its logs once it has finished "
        f"(`csctl logs {job_id} -f` follows them meanwhile)\n"
    )
    assert not (tmp_path / "x.zip").exists()
