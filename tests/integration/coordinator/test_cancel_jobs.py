"""CancelJobs over real gRPC (SQLite and PostgreSQL): a selection cancelled in one call, with
the same rule of who may cancel what as CancelJob, running jobs torn down, hostile selections
refused with one line naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from appliance._proto.v1 import cluster_pb2 as pb
from appliance._proto.v1 import cluster_pb2_grpc, common_pb2
from appliance.client import ApplianceClient
from appliance.domain.inventory import NodeState
from appliance.domain.phases import Phase
from appliance.protocol.errors import FIELD_KEY
from tests.integration.coordinator.harness import (
    RunningCoordinator,
    user_tokens,
    wait_until,
    worker_processes,
)
from tests.tls import secure_channel

PARAMS = "model:\n  name: fc_mnist\n  hidden_sizes: [8]\n"
SYSTEMS = ["cs2-01", "cs2-02", "cs2-03", "cs2-04"]
QUEUED = common_pb2.PHASE_QUEUED


class Caller:
    """One user's token on every call."""

    def __init__(self, stub: cluster_pb2_grpc.ClusterServiceStub, token: str) -> None:
        self.stub = stub
        self.metadata = (("authorization", f"Bearer {token}"),)

    def submit(self, **labels: str) -> str:
        spec = pb.JobSpec(params_yaml=PARAMS, num_csx=1, num_steps=2, labels=labels)
        return self.stub.SubmitJob(pb.SubmitJobRequest(spec=spec), metadata=self.metadata).id

    def cancel_jobs(self, **fields: object) -> pb.CancelJobsResponse:
        request = pb.CancelJobsRequest(**fields)  # type: ignore[arg-type]
        return self.stub.CancelJobs(request, metadata=self.metadata)

    def phase(self, job_id: str) -> int:
        request = pb.GetJobRequest(job_id=job_id)
        return self.stub.GetJob(request, metadata=self.metadata).phase


@pytest.fixture
def callers(tmp_path: Path, store_url: str) -> Iterator[dict[str, Caller]]:
    """alice and carol (group nlp), bob (cv), root (admin); every CS-2 in maintenance."""
    tokens_file = tmp_path / "tokens.yaml"
    tokens = user_tokens(tokens_file)
    running = RunningCoordinator(
        tmp_path / "data", auth_tokens_file=tokens_file, database_url=store_url
    ).start()
    running.coordinator.ctx.store.set_node_state(SYSTEMS, NodeState.MAINTENANCE)
    try:
        with secure_channel(running.address) as channel:
            stub = cluster_pb2_grpc.ClusterServiceStub(channel)
            yield {name: Caller(stub, token) for name, token in tokens.items()}
    finally:
        running.stop()


def test_one_call_cancels_the_selection_and_leaves_what_the_caller_may_not_cancel(
    callers: dict[str, Caller],
) -> None:
    alice, bob, carol, root = (callers[n] for n in ("alice", "bob", "carol", "root"))
    alices = [alice.submit(team="nlp") for _ in range(3)]
    bobs = [bob.submit(team="nlp") for _ in range(2)]

    mine = bob.cancel_jobs(mine=True, user="alice")  # mine: the token's user, whatever `user`
    assert (mine.cancelled, mine.refused, sorted(mine.cancelled_ids)) == (2, 0, sorted(bobs))
    assert mine.message == "cancelled 2 jobs"

    others = bob.cancel_jobs(labels={"team": "nlp"}, phases=[QUEUED])
    assert (others.cancelled, others.refused, sorted(others.refused_ids)) == (
        0, 3, sorted(alices),
    )  # fmt: skip
    assert others.refusal.startswith("bob may not cancel a job of alice")
    assert [alice.phase(j) for j in alices] == [QUEUED] * 3

    with pytest.raises(grpc.RpcError) as denied:
        bob.cancel_jobs(all=True)
    assert denied.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert dict(denied.value.trailing_metadata() or ())[FIELD_KEY] == "all"

    group = carol.cancel_jobs(user="alice", reason="sweep over")
    assert group.cancelled == 3 and sorted(group.cancelled_ids) == sorted(alices)
    events = alice.stub.GetJobEvents(
        pb.GetJobEventsRequest(job_id=alices[0]), metadata=alice.metadata
    ).events
    assert [(e.to_phase, e.reason) for e in events][-1] == (
        common_pb2.PHASE_CANCELLED,
        "sweep over",
    )
    later = alice.submit()
    everyone = root.cancel_jobs(all=True, phases=[QUEUED])
    assert (everyone.cancelled, list(everyone.cancelled_ids)) == (1, [later])


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({}, "all", "say whose jobs to cancel"),
        ({"phases": [QUEUED]}, "all", "phases only narrow"),
        ({"labels": {f"k{i}": "v" for i in range(10_000)}}, "labels", "at most 64 labels"),
        ({"labels": {"k" * 200_000: "v"}}, "labels", "a key is at most 317"),
        ({"mine": True, "phases": [99]}, "phases", "phase 99 is not a phase"),
        ({"mine": True, "phases": [common_pb2.PHASE_SUCCEEDED]}, "phases", "finished phase"),
        ({"user": "no such/user"}, "user", "user must be"),
        ({"mine": True, "job_ids": ["wsjob-000000000000"]}, "job_ids", "not both"),
        ({"job_ids": ["x" * 100_000]}, "job_ids", "is not a job id"),
        ({"mine": True, "reason": "r" * 2_000}, "reason", "at most 1024"),
        ({"mine": True, "page_token": "t" * 100_000}, "page_token", "not one this server"),
    ],
)
def test_a_hostile_selection_is_refused_with_one_line_naming_the_field(
    callers: dict[str, Caller], fields: dict[str, object], field: str, says: str
) -> None:
    alice = callers["alice"]
    job_id = alice.submit()
    with pytest.raises(grpc.RpcError) as refused:
        alice.cancel_jobs(**fields)
    error = refused.value
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert dict(error.trailing_metadata() or ())[FIELD_KEY] == field
    details = error.details() or ""
    assert says in details and "\n" not in details and len(details) < 300
    assert alice.phase(job_id) == QUEUED


@pytest.fixture
def coordinator_database(store_url: str) -> str:
    return store_url


def test_running_jobs_of_a_selection_are_torn_down_and_their_systems_freed(
    coordinator: RunningCoordinator, client: ApplianceClient, params_file: Path
) -> None:
    big = client.submit(params=params_file, num_csx=4, num_steps=100_000, labels={"sweep": "1"})
    wait_until(lambda: big.status.phase is Phase.RUNNING, 60, "the 4-system job to run")
    queued = [
        client.submit(params=params_file, num_csx=1, num_steps=5, labels={"sweep": "1"})
        for _ in range(3)
    ]
    other = client.submit(params=params_file, num_csx=2, num_steps=5, labels={"sweep": "2"})

    result = client.cancel_jobs(mine=True, labels={"sweep": "1"})

    assert result.cancelled == 4
    assert set(result.cancelled_ids) == {big.id, *(job.id for job in queued)}
    wait_until(lambda: not worker_processes(big.id), 10, "the running job's replicas to go")
    assert other.wait(timeout=60).phase is Phase.SUCCEEDED  # the systems came back
    assert [e.to_phase for e in client.events(big.id)][-1] is Phase.CANCELLED
    assert {job.status.phase for job in [big, *queued]} == {Phase.CANCELLED}
