"""Client leases: what submit sends, and the heartbeat thread that keeps held jobs alive."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_cluster_service import FakeCluster

from appliance._proto.v1 import cluster_pb2
from appliance.client import ApplianceClient
from appliance.client.lease import LeaseKeeper
from appliance.domain.errors import InvalidSpec, NotFound, Unavailable
from appliance.domain.phases import Phase
from tests.integration.coordinator.harness import wait_until


@pytest.fixture
def fast_client(cluster: FakeCluster) -> Iterator[ApplianceClient]:
    with ApplianceClient(
        cluster.address, timeout=5.0, lease_seconds=1.0, heartbeat_interval=0.05
    ) as client:
        yield client


def _submit_request(cluster: FakeCluster) -> cluster_pb2.SubmitJobRequest:
    request = cluster.service.requests_of("SubmitJob")[-1]
    assert isinstance(request, cluster_pb2.SubmitJobRequest)
    return request


def test_submit_holds_a_lease_by_default(
    client: ApplianceClient, cluster: FakeCluster, params_file: Path
) -> None:
    job = client.submit(params=params_file, num_csx=1, num_steps=5)

    request = _submit_request(cluster)
    assert request.lease_seconds == 60.0
    assert request.lease_holder == f"{socket.gethostname()}:{os.getpid()}"
    assert client.held_jobs == {job.id}
    lease = job.status.lease
    assert lease is not None and lease.holder == request.lease_holder


def test_detach_on_submit_or_on_the_client_sends_no_lease(
    client: ApplianceClient, cluster: FakeCluster, params_file: Path
) -> None:
    job = client.submit(params=params_file, num_csx=1, num_steps=5, detach=True)
    assert (_submit_request(cluster).lease_seconds, client.held_jobs) == (0.0, frozenset())
    assert job.status.lease is None

    with ApplianceClient(cluster.address, detach=True) as detached:
        detached.submit(params=params_file, num_csx=1, num_steps=5)
        assert _submit_request(cluster).lease_seconds == 0.0
        leased = detached.submit(params=params_file, num_csx=1, num_steps=5, detach=False)
        assert _submit_request(cluster).lease_seconds == 60.0
        assert detached.held_jobs == {leased.id}


def test_heartbeats_renew_held_jobs_until_they_end(
    fast_client: ApplianceClient, cluster: FakeCluster, params_file: Path
) -> None:
    first = fast_client.submit(params=params_file, num_csx=1, num_steps=5)
    second = fast_client.submit(params=params_file, num_csx=1, num_steps=5)

    cluster.service.wait_for_heartbeats(first.id, 3)
    cluster.service.wait_for_heartbeats(second.id, 3)
    cluster.service.transition(first.id, Phase.SUCCEEDED)

    wait_until(lambda: fast_client.held_jobs == {second.id}, 10, "the finished job to drop")
    beats = cluster.service.heartbeats[second.id]
    cluster.service.wait_for_heartbeats(second.id, beats + 2)


def test_close_stops_the_heartbeats(cluster: FakeCluster, params_file: Path) -> None:
    client = ApplianceClient(cluster.address, lease_seconds=1.0, heartbeat_interval=0.05)
    job = client.submit(params=params_file, num_csx=1, num_steps=5)
    cluster.service.wait_for_heartbeats(job.id, 1)

    client.close()

    assert client.held_jobs == frozenset()
    threads = [t for t in threading.enumerate() if t.name == "appliance-lease-heartbeat"]
    assert threads == []


def test_a_relative_model_dir_is_sent_absolute(
    client: ApplianceClient,
    cluster: FakeCluster,
    params_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.chdir(tmp_path)

    client.submit(params=params_file, num_csx=1, num_steps=5, model_dir="out/run1", detach=True)
    client.submit(params=params_file, num_csx=1, num_steps=5, detach=True)

    first, second = cluster.service.requests_of("SubmitJob")
    assert isinstance(first, cluster_pb2.SubmitJobRequest)
    assert isinstance(second, cluster_pb2.SubmitJobRequest)
    assert first.spec.model_dir == str(tmp_path / "out" / "run1")
    assert second.spec.model_dir == ""


@pytest.mark.parametrize(("lease", "interval"), [(1.0, 1.0), (1.0, 0.0), (-1.0, 0.5)])
def test_a_heartbeat_that_cannot_keep_the_lease_is_refused(lease: float, interval: float) -> None:
    with pytest.raises(InvalidSpec):
        ApplianceClient("127.0.0.1:1", lease_seconds=lease, heartbeat_interval=interval)


def test_keeper_drops_unknown_jobs_and_retries_failed_heartbeats() -> None:
    calls: list[str] = []
    seen = threading.Condition()

    def heartbeat(job_id: str) -> bool:
        with seen:
            calls.append(job_id)
            seen.notify_all()
        if job_id == "gone":
            raise NotFound("job gone not found")
        if job_id == "flaky" and calls.count("flaky") == 1:
            raise Unavailable("coordinator restarting")
        return True

    keeper = LeaseKeeper(heartbeat, interval=0.01)
    keeper.hold("gone")
    keeper.hold("flaky")
    with seen:
        assert seen.wait_for(lambda: calls.count("flaky") >= 3, 10)
    keeper.stop(timeout=5)

    assert calls.count("gone") == 1
    assert keeper.held == frozenset()
    with pytest.raises(RuntimeError, match="closed"):
        keeper.hold("late")
