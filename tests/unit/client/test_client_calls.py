"""ApplianceClient request/response calls against the fake ClusterService."""

from __future__ import annotations

import getpass
from pathlib import Path

import pytest
import yaml
from fake_cluster_service import FAKE_VERSION, FakeCluster

from appliance._proto.v1 import cluster_pb2
from appliance.client import ApplianceClient, JobHandle
from appliance.domain.errors import InvalidSpec, NotFound, Unavailable
from appliance.domain.phases import Phase
from appliance.domain.spec import Mode, Priority


def test_submit_reads_the_params_file_and_sends_the_spec(
    client: ApplianceClient, cluster: FakeCluster, params_file: Path
) -> None:
    job = client.submit(
        params=str(params_file),
        num_csx=2,
        num_steps=50,
        mode="eval",
        labels={"team": "nlp"},
        priority="p1",
        model_dir="/models/fc",
    )

    assert isinstance(job, JobHandle)
    (request,) = cluster.service.requests_of("SubmitJob")
    assert isinstance(request, cluster_pb2.SubmitJobRequest)
    assert request.spec.params_yaml == params_file.read_text()
    assert (request.spec.num_csx, request.spec.num_steps) == (2, 50)
    assert dict(request.spec.labels) == {"team": "nlp"}
    assert request.spec.model_dir == "/models/fc"
    assert request.user == getpass.getuser()
    status = job.status
    assert status.id == job.id
    assert (status.spec.mode, status.spec.priority) == (Mode.EVAL, Priority.P1)


def test_submit_accepts_a_mapping_and_an_explicit_user(
    client: ApplianceClient, cluster: FakeCluster
) -> None:
    params = {"model": {"name": "fc_mnist", "hidden_sizes": [8]}, "runconfig": {"seed": 1}}

    job = client.submit(params=params, num_csx=1, num_steps=5, user="bob")

    (request,) = cluster.service.requests_of("SubmitJob")
    assert isinstance(request, cluster_pb2.SubmitJobRequest)
    assert yaml.safe_load(request.spec.params_yaml) == params
    assert request.user == "bob"
    assert job.status.user == "bob"


def test_missing_params_file_is_an_invalid_spec_naming_the_path(
    client: ApplianceClient, cluster: FakeCluster, tmp_path: Path
) -> None:
    missing = tmp_path / "nope.yaml"

    with pytest.raises(InvalidSpec) as raised:
        client.submit(params=missing, num_csx=1, num_steps=5)

    assert raised.value.field == "params"
    assert str(missing) in raised.value.message
    assert "does not exist" in raised.value.message
    assert cluster.service.requests_of("SubmitJob") == []


@pytest.mark.parametrize(
    ("content", "expected"),
    [("model: [unclosed\n", "not valid YAML"), ("bogus: {}\n", "unknown section")],
)
def test_bad_params_file_names_the_file(
    client: ApplianceClient, tmp_path: Path, content: str, expected: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)

    with pytest.raises(InvalidSpec, match=expected) as raised:
        client.submit(params=path, num_csx=1, num_steps=5)

    assert str(path) in raised.value.message


def test_a_directory_as_params_is_rejected(client: ApplianceClient, tmp_path: Path) -> None:
    with pytest.raises(InvalidSpec, match="is a directory"):
        client.submit(params=tmp_path, num_csx=1, num_steps=5)


def test_bad_priority_is_rejected_before_sending(
    client: ApplianceClient, params_file: Path
) -> None:
    with pytest.raises(InvalidSpec) as raised:
        client.submit(params=params_file, num_csx=1, num_steps=5, priority="urgent")
    assert raised.value.field == "priority"


def test_unknown_job_is_not_found(client: ApplianceClient) -> None:
    with pytest.raises(NotFound, match="wsjob-doesnotexist1 not found"):
        client.get_job("wsjob-doesnotexist1")
    with pytest.raises(NotFound):
        client.job("wsjob-doesnotexist1").cancel()


def test_unreachable_server_is_unavailable_naming_the_address(dead_address: str) -> None:
    with (
        ApplianceClient(dead_address, timeout=5.0) as client,
        pytest.raises(Unavailable) as raised,
    ):
        client.get_job("wsjob-abcdefabcdef12")

    assert f"cannot reach the appliance at {dead_address}" in raised.value.message


def test_list_passes_filters_and_pages_up_to_the_limit(
    client: ApplianceClient, cluster: FakeCluster
) -> None:
    for age in range(5):
        cluster.service.add_job(labels={"team": "nlp"}, created_at=1000.0 - age)
    cluster.service.add_job(labels={"team": "cv"})
    cluster.service.add_job(labels={"team": "nlp"}, phase=Phase.SUCCEEDED)

    jobs = client.list_jobs(labels={"team": "nlp"}, user="alice", limit=3)

    assert [job.created_at for job in jobs] == [1000.0, 999.0, 998.0]
    request = cluster.service.requests_of("ListJobs")[0]
    assert isinstance(request, cluster_pb2.ListJobsRequest)
    assert (dict(request.labels), request.user, request.all) == ({"team": "nlp"}, "alice", False)


def test_list_all_without_a_limit_streams_every_page(
    client: ApplianceClient, cluster: FakeCluster
) -> None:
    for phase in (Phase.QUEUED, Phase.RUNNING, Phase.FAILED, Phase.SUCCEEDED, Phase.CANCELLED):
        cluster.service.add_job(phase=phase)

    assert len(client.list_jobs(all=True)) == 5
    assert len(client.list_jobs()) == 2
    assert len(cluster.service.requests_of("StreamJobs")) == 2


def test_cancel_reports_whether_anything_changed(
    client: ApplianceClient, cluster: FakeCluster
) -> None:
    job_id = cluster.service.add_job(phase=Phase.RUNNING).id

    first = client.job(job_id).cancel(reason="no longer needed")
    second = client.cancel_job(job_id)

    assert (first.changed, first.job.phase, first.job.reason) == (
        True,
        Phase.CANCELLED,
        "no longer needed",
    )
    assert (second.changed, second.job.phase) == (False, Phase.CANCELLED)


def test_events_and_version(client: ApplianceClient, cluster: FakeCluster) -> None:
    job_id = cluster.service.add_job(phase=Phase.SCHEDULED).id

    events = client.events(job_id)

    assert [(e.from_phase, e.to_phase) for e in events] == [
        (None, Phase.QUEUED),
        (Phase.QUEUED, Phase.SCHEDULED),
    ]
    assert client.version() == FAKE_VERSION
