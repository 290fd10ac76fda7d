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


def _followed(
    csctl: Csctl, cluster: FakeCluster, before: list[str], after: str, *options: str
) -> tuple[int, str]:
    """`csctl logs ID -f [options]` of a running job whose chief wrote `before`, then, once
    csctl asked for the logs, `after`, and ended."""
    job_id = cluster.service.add_job(phase=Phase.RUNNING).id
    cluster.service.append_log(job_id, "chief-0", *before)

    def finish() -> None:
        cluster.service.wait_for_request("GetJobLogs")
        cluster.service.append_log(job_id, "chief-0", after)
        cluster.service.transition(job_id, Phase.SUCCEEDED)

    driver = threading.Thread(target=finish)
    driver.start()
    result = csctl("logs", job_id, "-f", *options)
    driver.join(10)
    return result.exit_code, result.stdout


def test_logs_follow_ends_when_the_job_ends(csctl: Csctl, cluster: FakeCluster) -> None:
    followed = _followed(csctl, cluster, ["early"], "late")

    assert followed == (0, "[chief-0] early\n[chief-0] late\n")


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


def _stamped(second: int, text: str) -> str:
    return f"2026-11-28 12:00:{second:02d},{second * 7 % 1000:03d} {text}"


@pytest.fixture
def chatty_job(cluster: FakeCluster) -> str:
    """A chief, a CS-2 and a MemoryX server whose lines the coordinator sends replica by
    replica; MemoryX's last, though the chief wrote the newest steps."""
    job_id = cluster.service.add_job(phase=Phase.RUNNING).id
    service = cluster.service
    chief = [
        _stamped(1, "starting"),
        _stamped(4, "step 5/10"),
        "Traceback (most recent call last):",
    ]
    service.append_log(job_id, "chief-0", *chief, _stamped(9, "step 10/10"))
    service.append_log(job_id, "cs2-0", _stamped(2, "ready"), _stamped(8, "done"))
    service.append_log(job_id, "memoryx-0", _stamped(3, "serving"), _stamped(4, "weights"))
    service.transition(job_id, Phase.SUCCEEDED, "all steps done")
    return job_id


def test_logs_are_interleaved_by_time_so_the_newest_come_last(
    csctl: Csctl, chatty_job: str
) -> None:
    result = csctl("logs", chatty_job)

    assert result.exit_code == 0, result.output
    assert [line.split(" ", 1)[0] + " " + line.rsplit(" ", 1)[-1]
            for line in result.stdout.splitlines()] == [
        "[chief-0] starting", "[cs2-0] ready", "[memoryx-0] serving",
        "[chief-0] 5/10", "[chief-0] last):",  # the same second: the coordinator's order
        "[memoryx-0] weights", "[cs2-0] done", "[chief-0] 10/10",
    ]  # fmt: skip


def test_tail_keeps_the_last_lines_and_follow_goes_on_from_there(
    csctl: Csctl, cluster: FakeCluster, chatty_job: str
) -> None:
    last_two = csctl("logs", chatty_job, "--tail", "2")
    assert last_two.stdout.splitlines() == [
        f"[cs2-0] {_stamped(8, 'done')}", f"[chief-0] {_stamped(9, 'step 10/10')}",
    ]  # fmt: skip
    assert csctl("logs", chatty_job, "--tail", "0").stdout == ""
    one = csctl("logs", chatty_job, "-r", "cs2-0", "--tail", "1", "-f")
    assert one.stdout == f"{_stamped(8, 'done')}\n"
    too_many = csctl("logs", chatty_job, "--tail", "100001")
    assert too_many.exit_code == 2 and "--tail" in too_many.stderr


def test_follow_with_tail_prints_each_new_line_once(csctl: Csctl, cluster: FakeCluster) -> None:
    followed = _followed(csctl, cluster, ["old 1", "old 2"], "new", "--tail", "1")

    assert followed in [
        (0, "[chief-0] old 2\n[chief-0] new\n"),  # "new" came after the first read
        (0, "[chief-0] new\n"),  # or before it
    ]
