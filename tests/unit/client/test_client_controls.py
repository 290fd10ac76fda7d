"""Priority, labels, the pool and logs through ApplianceClient and JobHandle."""

from __future__ import annotations

import pytest
from fake_cluster_service import FakeCluster

from appliance._proto.v1 import cluster_pb2
from appliance.client import ApplianceClient, NodeStatus
from appliance.domain.errors import Conflict, InvalidSpec, NotFound
from appliance.domain.inventory import NodeKind, NodeState
from appliance.domain.phases import Phase
from appliance.domain.spec import Priority


def test_set_priority_sends_the_priority_and_returns_the_job(
    client: ApplianceClient, cluster: FakeCluster
) -> None:
    job_id = cluster.service.add_job().id

    job = client.set_priority(job_id, "p1")
    again = client.job(job_id).set_priority(Priority.P3)

    assert (job.spec.priority, job.queue_position) == (Priority.P1, 1)
    assert again.spec.priority is Priority.P3


def test_set_priority_checks_the_priority_before_sending_and_a_finished_job_conflicts(
    client: ApplianceClient, cluster: FakeCluster
) -> None:
    job_id = cluster.service.add_job(phase=Phase.SUCCEEDED).id

    with pytest.raises(InvalidSpec, match="p0, p1, p2, p3"):
        client.set_priority(job_id, "urgent")
    assert cluster.service.requests_of("SetJobPriority") == []
    with pytest.raises(Conflict, match="SUCCEEDED"):
        client.set_priority(job_id, "p1")


def test_update_labels_sets_and_removes(client: ApplianceClient, cluster: FakeCluster) -> None:
    job_id = cluster.service.add_job(labels={"team": "nlp", "tmp": "x"}).id

    job = client.update_labels(job_id, set={"team": "cv", "run": "7"}, remove=["tmp"])
    handle_job = client.job(job_id).update_labels(remove=["run"])

    assert dict(job.spec.labels) == {"team": "cv", "run": "7"}
    assert dict(handle_job.spec.labels) == {"team": "cv"}
    with pytest.raises(InvalidSpec):
        client.update_labels(job_id, set={"bad key": "v"})


def test_nodes_are_typed(client: ApplianceClient, cluster: FakeCluster) -> None:
    cluster.service.nodes[0].state = "maintenance"
    cluster.service.nodes[4].used = 4 << 30
    cluster.service.nodes[4].jobs.append("wsjob-abc")

    nodes = client.nodes()

    assert len(nodes) == 12 and all(isinstance(node, NodeStatus) for node in nodes)
    assert [n.kind for n in nodes[-2:]] == [NodeKind.WORKER, NodeKind.WORKER]
    assert (nodes[0].name, nodes[0].kind, nodes[0].state) == (
        "cs2-01",
        NodeKind.SYSTEM,
        NodeState.MAINTENANCE,
    )
    assert nodes[0].free == 0
    memx = nodes[4]
    assert (memx.kind, memx.used, memx.jobs, memx.free) == (
        NodeKind.MEMORYX,
        4 << 30,
        ("wsjob-abc",),
        12 << 30,
    )


def test_logs_of_every_replica_and_of_one(client: ApplianceClient, cluster: FakeCluster) -> None:
    job_id = cluster.service.add_job(phase=Phase.SUCCEEDED).id
    cluster.service.append_log(job_id, "chief-0", "start", "step 1/1")
    cluster.service.append_log(job_id, "cs2-0", "ready")

    assert list(client.logs(job_id)) == [
        ("chief-0", "start"),
        ("chief-0", "step 1/1"),
        ("cs2-0", "ready"),
    ]
    assert list(client.job(job_id).logs("cs2-0")) == [("cs2-0", "ready")]
    with pytest.raises(NotFound):
        list(client.logs(job_id, "cs2-9"))


def test_following_logs_ends_when_the_job_ends(
    client: ApplianceClient, cluster: FakeCluster
) -> None:
    job_id = cluster.service.add_job(phase=Phase.RUNNING).id
    cluster.service.append_log(job_id, "chief-0", "first")

    lines = client.job(job_id).logs(follow=True)
    assert next(lines) == ("chief-0", "first")
    cluster.service.append_log(job_id, "chief-0", "second")
    assert next(lines) == ("chief-0", "second")
    cluster.service.append_log(job_id, "cs2-0", "last")
    cluster.service.transition(job_id, Phase.SUCCEEDED)

    assert list(lines) == [("cs2-0", "last")]
    request = cluster.service.requests_of("GetJobLogs")[0]
    assert isinstance(request, cluster_pb2.GetJobLogsRequest) and request.follow
