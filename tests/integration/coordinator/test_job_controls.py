"""Priority, labels, the pool, client leases and replica logs over real gRPC."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from appliance._proto.v1 import cluster_pb2 as pb
from appliance._proto.v1 import cluster_pb2_grpc, common_pb2
from appliance.domain.inventory import NodeState
from tests.integration.coordinator.harness import RunningCoordinator, wait_until
from tests.tls import secure_channel

PARAMS = "model:\n  name: fc_mnist\n  hidden_sizes: [8]\n"
SYSTEMS = ["cs2-01", "cs2-02", "cs2-03", "cs2-04"]


@pytest.fixture
def stub(coordinator: RunningCoordinator) -> Iterator[cluster_pb2_grpc.ClusterServiceStub]:
    with secure_channel(coordinator.address) as channel:
        yield cluster_pb2_grpc.ClusterServiceStub(channel)


def _hold_queue(coordinator: RunningCoordinator) -> None:
    """Every system in maintenance: submitted jobs stay QUEUED."""
    coordinator.coordinator.ctx.store.set_node_state(SYSTEMS, NodeState.MAINTENANCE)


def _submit(stub: cluster_pb2_grpc.ClusterServiceStub, **fields: object) -> pb.Job:
    lease = float(fields.pop("lease_seconds", 0.0))  # type: ignore[arg-type]
    spec = pb.JobSpec(params_yaml=PARAMS, num_csx=1, num_steps=2, **fields)  # type: ignore[arg-type]
    return stub.SubmitJob(pb.SubmitJobRequest(spec=spec, user="u", lease_seconds=lease))


def _get(stub: cluster_pb2_grpc.ClusterServiceStub, job_id: str) -> pb.Job:
    return stub.GetJob(pb.GetJobRequest(job_id=job_id))


def test_set_priority_moves_a_job_ahead_and_is_frozen_once_terminal(
    coordinator: RunningCoordinator, stub: cluster_pb2_grpc.ClusterServiceStub
) -> None:
    _hold_queue(coordinator)
    first, second = _submit(stub), _submit(stub)
    wait_until(lambda: _get(stub, second.id).queue_position == 2, 10, "queue positions")

    moved = stub.SetJobPriority(pb.SetJobPriorityRequest(job_id=second.id, priority=2))
    assert moved.spec.priority == common_pb2.PRIORITY_P1
    assert _get(stub, second.id).queue_position == 1
    assert _get(stub, first.id).queue_position == 2
    wait_until(lambda: "behind " + second.id in _get(stub, first.id).pending_reason, 10)

    stub.CancelJob(pb.CancelJobRequest(job_id=first.id))
    with pytest.raises(grpc.RpcError) as info:
        stub.SetJobPriority(pb.SetJobPriorityRequest(job_id=first.id, priority=2))
    assert info.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "frozen" in info.value.details()
    with pytest.raises(grpc.RpcError) as info:
        stub.SetJobPriority(pb.SetJobPriorityRequest(job_id=second.id, priority=0))
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_labels_are_added_changed_removed_and_filtered_on(
    coordinator: RunningCoordinator, stub: cluster_pb2_grpc.ClusterServiceStub
) -> None:
    _hold_queue(coordinator)
    job = _submit(stub, labels={"team": "nlp", "tmp": "x"})
    updated = stub.UpdateJobLabels(
        pb.UpdateJobLabelsRequest(job_id=job.id, set={"team": "cv", "run": "7"}, remove=["tmp"])
    )
    assert dict(updated.spec.labels) == {"team": "cv", "run": "7"}
    listed = stub.ListJobs(pb.ListJobsRequest(labels={"team": "cv"})).jobs
    assert [j.id for j in listed] == [job.id]
    assert dict(listed[0].spec.labels) == {"team": "cv", "run": "7"}
    assert list(stub.ListJobs(pb.ListJobsRequest(labels={"team": "nlp"})).jobs) == []
    with pytest.raises(grpc.RpcError) as info:
        stub.UpdateJobLabels(pb.UpdateJobLabelsRequest(job_id=job.id, set={"bad key": "v"}))
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_list_nodes_shows_states_usage_and_holders(
    coordinator: RunningCoordinator, stub: cluster_pb2_grpc.ClusterServiceStub
) -> None:
    coordinator.coordinator.ctx.store.set_node_state(["cs2-04"], NodeState.ERROR)
    nodes = {n.name: n for n in stub.ListNodes(pb.ListNodesRequest()).nodes}
    assert sorted(nodes) == [
        *SYSTEMS, "memx-01", "memx-02", "memx-03", "memx-04", "swarmx-01", "swarmx-02",
        "worker-01", "worker-02",
    ]  # fmt: skip
    assert nodes["worker-01"].kind == "worker" and nodes["worker-01"].capacity == 8
    assert nodes["cs2-04"].state == "error" and nodes["cs2-01"].state == "ok"
    assert nodes["memx-01"].kind == "memoryx" and nodes["memx-01"].capacity == 16 << 30
    assert all(n.used == 0 and not n.jobs for n in nodes.values())


def test_a_job_whose_client_stops_heartbeating_is_cancelled(
    coordinator: RunningCoordinator, stub: cluster_pb2_grpc.ClusterServiceStub
) -> None:
    _hold_queue(coordinator)
    held = _submit(stub, lease_seconds=1.0)
    forgotten = _submit(stub, lease_seconds=1.0)
    detached = _submit(stub)
    assert held.lease.lease_seconds == 1.0 and not detached.HasField("lease")

    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(0.2):
            stub.HeartbeatLease(pb.HeartbeatLeaseRequest(job_id=held.id, holder="host:42"))

    beating = threading.Thread(target=heartbeat)
    beating.start()
    try:
        wait_until(lambda: _get(stub, forgotten.id).phase == common_pb2.PHASE_CANCELLED, 15)
        assert _get(stub, held.id).phase == common_pb2.PHASE_QUEUED
        assert _get(stub, held.id).lease.holder == "host:42"
    finally:
        stop.set()
        beating.join()
    reason = _get(stub, forgotten.id).reason
    assert reason.startswith("client lease expired"), reason
    wait_until(lambda: _get(stub, held.id).phase == common_pb2.PHASE_CANCELLED, 15)
    assert _get(stub, detached.id).phase == common_pb2.PHASE_QUEUED
    answer = stub.HeartbeatLease(pb.HeartbeatLeaseRequest(job_id=held.id))
    assert not answer.keep_running


def test_logs_of_a_replica_and_of_every_replica(
    coordinator: RunningCoordinator, stub: cluster_pb2_grpc.ClusterServiceStub, params_file: Path
) -> None:
    spec = pb.JobSpec(params_yaml=params_file.read_text(), num_csx=1, num_steps=3)
    job = stub.SubmitJob(pb.SubmitJobRequest(spec=spec, user="u"))
    followed = list(stub.GetJobLogs(pb.GetJobLogsRequest(job_id=job.id, follow=True), timeout=60))
    assert _get(stub, job.id).phase == common_pb2.PHASE_SUCCEEDED  # follow ended at the end
    replicas = {chunk.replica for chunk in followed}
    assert replicas == {"chief-0", "cs2-0", "memoryx-0", "swarmx-0"}
    chief = [line for c in followed if c.replica == "chief-0" for line in c.lines]
    assert any("step 3/3" in line for line in chief)

    one = list(stub.GetJobLogs(pb.GetJobLogsRequest(job_id=job.id, replica="cs2-0")))
    assert {c.replica for c in one} == {"cs2-0"}
    with pytest.raises(grpc.RpcError) as info:
        list(stub.GetJobLogs(pb.GetJobLogsRequest(job_id=job.id, replica="cs2-9")))
    assert info.value.code() is grpc.StatusCode.NOT_FOUND
    assert "cs2-0" in info.value.details()
