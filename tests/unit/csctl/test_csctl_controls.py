"""`csctl label job`, `csctl job set-priority` and `csctl get jobs --show-pending`."""

from __future__ import annotations

import pytest
from csctl_runner import Csctl
from fake_cluster_service import FakeCluster

from appliance._proto.v1 import cluster_pb2
from appliance.domain.arrays import TaskOf
from appliance.domain.errors import InvalidSpec
from appliance.domain.phases import Phase
from csctl.controls import parse_label_changes


def test_label_job_sets_and_removes_kubectl_style(csctl: Csctl, cluster: FakeCluster) -> None:
    job_id = cluster.service.add_job(labels={"team": "nlp", "tmp": "x"}).id

    result = csctl("label", "job", job_id, "team=cv", "run=7", "tmp-")

    assert (result.exit_code, result.stdout) == (0, f"job {job_id} labeled: run=7,team=cv\n")
    request = cluster.service.requests_of("UpdateJobLabels")[0]
    assert isinstance(request, cluster_pb2.UpdateJobLabelsRequest)
    assert (dict(request.set), list(request.remove)) == ({"team": "cv", "run": "7"}, ["tmp"])


@pytest.mark.parametrize("arg", ["team", "bad key=v", "-", "k=v,w"])
def test_bad_label_arguments_are_usage_errors(
    csctl: Csctl, cluster: FakeCluster, arg: str
) -> None:
    job_id = cluster.service.add_job().id

    result = csctl("label", "job", job_id, arg)

    assert result.exit_code == 2, result.output
    assert cluster.service.requests_of("UpdateJobLabels") == []


def test_parse_label_changes_refuses_set_and_remove_of_one_key() -> None:
    assert parse_label_changes(("a=1", "b-")) == ({"a": "1"}, ["b"])
    with pytest.raises(InvalidSpec, match="both set and removed"):
        parse_label_changes(("a=1", "a-"))


def test_label_of_an_unknown_job_exits_1(csctl: Csctl) -> None:
    result = csctl("label", "job", "wsjob-doesnotexist1", "a=b")

    assert (result.exit_code, result.stderr) == (1, "error: job wsjob-doesnotexist1 not found\n")


def test_set_priority_reports_the_new_priority_and_queue_position(
    csctl: Csctl, cluster: FakeCluster
) -> None:
    job_id = cluster.service.add_job().id

    result = csctl("job", "set-priority", job_id, "P1")

    assert (result.exit_code, result.stdout) == (
        0,
        f"job {job_id} priority set to P1; queue position 1\n",
    )


def test_set_priority_of_an_array_says_its_tasks_were_set(
    csctl: Csctl, cluster: FakeCluster
) -> None:
    task = cluster.service.add_job(array=TaskOf("wsjob-sweep0000001", 0))

    result = csctl("job", "set-priority", "wsjob-sweep0000001", "p2")

    assert (result.exit_code, result.stdout) == (
        0,
        "the tasks of array wsjob-sweep0000001 priority set to P2\n",
    )
    assert task.id != "wsjob-sweep0000001"


def test_set_priority_usage_and_state_errors(csctl: Csctl, cluster: FakeCluster) -> None:
    done = cluster.service.add_job(phase=Phase.SUCCEEDED).id

    assert csctl("job", "set-priority", done, "urgent").exit_code == 2
    finished = csctl("job", "set-priority", done, "p1")
    assert finished.exit_code == 1 and finished.stderr.startswith("error: ")


def test_show_pending_adds_the_queue_position_and_reason(
    csctl: Csctl, cluster: FakeCluster
) -> None:
    cluster.service.add_job(pending_reason="needs 2 systems, 0 free", queue_position=2)
    cluster.service.add_job(phase=Phase.RUNNING, created_at=1.0)

    plain = csctl("get", "jobs")
    pending = csctl("get", "jobs", "--show-pending")

    assert "PENDING" not in plain.stdout
    header, queued, running = pending.stdout.splitlines()
    assert header.split()[-3:] == ["LABELS", "PENDING", "START(EST)"]
    assert queued.endswith("   #2: needs 2 systems, 0 free   -")
    assert running.split()[-2:] == ["alice", "-"]


def test_pending_columns_come_from_the_list_alone(csctl: Csctl, cluster: FakeCluster) -> None:
    """Listed summaries carry queue positions and reasons: no GetJob per queued job."""
    for n in range(1, 151):
        cluster.service.add_job(pending_reason=f"needs 1 system ({n})", queue_position=n)
    cluster.service.add_job(pending_reason="waiting for the scheduler", created_at=1.0)

    pending = csctl("get", "jobs", "--show-pending")
    wide = csctl("get", "jobs", "-o", "wide")

    assert [name for name, _ in cluster.service.requests] == ["StreamJobs", "StreamJobs"]
    expected = {f"#{n}: needs 1 system ({n})" for n in range(1, 151)}
    for output in (pending.stdout, wide.stdout):
        *rows, oldest = output.splitlines()[1:]
        assert {row[row.index("#") :].removesuffix("-").rstrip() for row in rows} == expected
        assert oldest.removesuffix("-").rstrip().endswith("   waiting for the scheduler")


def test_get_job_table_shows_the_queue_position(csctl: Csctl, cluster: FakeCluster) -> None:
    job_id = cluster.service.add_job(pending_reason="needs 1 system", queue_position=3).id

    result = csctl("get", "job", job_id, "-o", "table")

    assert "QUEUE POSITION: 3" in result.stdout
