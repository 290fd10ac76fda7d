"""`csctl cancel job`, `csctl version`, errors and `python -m csctl`."""

from __future__ import annotations

import subprocess
import sys

from csctl_runner import Csctl
from fake_cluster_service import FAKE_VERSION, FakeCluster

import appliance
from appliance.domain.phases import Phase


def test_cancel_twice_says_there_is_nothing_left_to_do(csctl: Csctl, cluster: FakeCluster) -> None:
    job_id = cluster.service.add_job(phase=Phase.RUNNING).id

    first = csctl("cancel", "job", job_id)
    second = csctl("cancel", "job", job_id)

    assert (first.exit_code, first.stdout) == (0, f"job {job_id} cancelled\n")
    assert (second.exit_code, second.stdout) == (
        0,
        f"job {job_id} already CANCELLED; nothing to do\n",
    )


def test_cancel_several_reports_each_and_fails_if_one_is_missing(
    csctl: Csctl, cluster: FakeCluster
) -> None:
    done = cluster.service.add_job(phase=Phase.SUCCEEDED).id
    queued = cluster.service.add_job().id

    result = csctl("cancel", "job", done, "wsjob-doesnotexist1", queued)

    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        f"job {done} already SUCCEEDED; nothing to do",
        f"job {queued} cancelled",
    ]
    assert result.stderr == "error: job wsjob-doesnotexist1 not found\n"


def test_cancel_of_an_unknown_job_exits_1_with_one_line(csctl: Csctl) -> None:
    result = csctl("cancel", "job", "wsjob-doesnotexist1")

    assert result.exit_code == 1
    assert result.stderr == "error: job wsjob-doesnotexist1 not found\n"


def test_version_shows_client_and_server(csctl: Csctl) -> None:
    result = csctl("version")

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"csctl (client): {appliance.__version__}",
        f"appliance (server {csctl.address}): {FAKE_VERSION}",
    ]


def test_unreachable_server_is_one_line_and_exit_1(dead_csctl: Csctl) -> None:
    result = dead_csctl("get", "jobs")

    assert result.exit_code == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: cannot reach the appliance at {dead_csctl.address};")
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_usage_errors_exit_2(csctl: Csctl) -> None:
    assert csctl("get", "jobs", "-o", "xml").exit_code == 2
    assert csctl("cancel", "job").exit_code == 2


def test_python_dash_m_csctl_runs() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "csctl", "get", "--help"], capture_output=True, text=True
    )

    assert completed.returncode == 0
    assert "csctl get jobs" in completed.stdout
