"""Holds over gRPC with authentication on (#37), on both stores: a user holds and releases
their own queued jobs, an admin anyone's, and only an admin releases an admin's hold; every
refusal is one line and changes nothing; every hold and release is audited."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from appliance._proto.v1 import cluster_pb2 as pb
from appliance._proto.v1 import cluster_pb2_grpc
from appliance.client import ApplianceClient
from appliance.domain.audit import Door, Outcome
from appliance.domain.inventory import NodeState
from appliance.server.auth import create_token
from tests.integration.coordinator.harness import RunningCoordinator, wait_until
from tests.tls import secure_channel

PARAMS = "model:\n  name: fc_mnist\n  hidden_sizes: [8]\n"
SYSTEMS = ["cs2-01", "cs2-02", "cs2-03", "cs2-04"]


@dataclass
class Cluster:
    running: RunningCoordinator
    tokens: dict[str, str]


@pytest.fixture
def cluster(tmp_path: Path, store_url: str) -> Iterator[Cluster]:
    tokens_file = tmp_path / "tokens.yaml"
    tokens = {
        "alice": create_token(tokens_file, "alice", ["nlp"], admin=False),
        "bob": create_token(tokens_file, "bob", ["cv"], admin=False),
        "root": create_token(tokens_file, "root", [], admin=True),
    }
    running = RunningCoordinator(
        tmp_path / "data", auth_tokens_file=tokens_file, database_url=store_url,
        audit_level="Metadata",
    ).start()  # fmt: skip
    running.coordinator.ctx.store.set_node_state(SYSTEMS, NodeState.MAINTENANCE)  # jobs wait
    try:
        yield Cluster(running, tokens)
    finally:
        running.stop()


def _as(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def _refused(call: object) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()  # type: ignore[operator]
    return info.value


def test_holds_follow_who_may_act_and_every_one_is_audited(cluster: Cluster) -> None:
    t = cluster.tokens
    with secure_channel(cluster.running.address) as channel:
        stub = cluster_pb2_grpc.ClusterServiceStub(channel)
        spec = pb.JobSpec(params_yaml=PARAMS, num_csx=1, num_steps=2)
        job = stub.SubmitJob(pb.SubmitJobRequest(spec=spec), metadata=_as(t["alice"]))
        held_spec = pb.JobSpec(params_yaml=PARAMS, num_csx=1, num_steps=2, hold=True)
        submitted_held = stub.SubmitJob(
            pb.SubmitJobRequest(spec=held_spec), metadata=_as(t["alice"])
        )
        assert (submitted_held.hold, submitted_held.held_by) == ("user", "alice")

        def hold(user: str, rpc: str = "HoldJob") -> pb.JobHoldResponse:
            request = pb.JobHoldRequest(job_id=job.id)
            answer: pb.JobHoldResponse = getattr(stub, rpc)(request, metadata=_as(t[user]))
            return answer

        def version() -> float:
            return stub.GetJob(pb.GetJobRequest(job_id=job.id), metadata=_as(t["root"])).updated_at

        before = version()
        denied = _refused(lambda: hold("bob"))
        assert denied.code() is grpc.StatusCode.PERMISSION_DENIED
        assert (
            denied.details()
            == "bob may not hold a job of alice: only its owner, members of nlp and admins may"
        )
        assert version() == before

        answer = hold("alice")
        assert answer.changed and answer.job.hold == "user" and answer.job.held_by == "alice"
        assert answer.message == f"job {job.id} held"
        wait_until(
            lambda: stub.GetJob(pb.GetJobRequest(job_id=job.id), metadata=_as(t["alice"]))
            .pending_reason_code == "HeldUser", 10, "the hold's reason",
        )  # fmt: skip
        assert hold("root").job.hold == "admin"  # an admin's hold replaces hers
        refused = _refused(lambda: hold("alice", "ReleaseJob"))
        assert refused.code() is grpc.StatusCode.PERMISSION_DENIED
        assert refused.details() == (
            f"job {job.id} is held by the admin root; only an admin may release it"
        )
        got = stub.GetJob(pb.GetJobRequest(job_id=job.id), metadata=_as(t["alice"]))
        assert (got.hold, got.pending_reason_code) == ("admin", "HeldAdmin")
        assert "\n" not in refused.details()

        released = hold("root", "ReleaseJob")
        assert released.changed and released.job.hold == "" and released.job.held_by == ""
        again = hold("root", "ReleaseJob")
        assert not again.changed and again.message == f"job {job.id} is not held; nothing to do"
        unknown = _refused(
            lambda: stub.HoldJob(
                pb.JobHoldRequest(job_id="wsjob-nosuchjob00000"), metadata=_as(t["root"])
            )
        )
        assert unknown.code() is grpc.StatusCode.NOT_FOUND
        not_running = _refused(lambda: hold("alice", "SuspendJob"))
        assert not_running.code() is grpc.StatusCode.FAILED_PRECONDITION
        assert not_running.details() == (
            f"job {job.id} is QUEUED; only a running job can be suspended"
        )

    expected = [
        ("bob", "hold", Outcome.REFUSED),
        ("alice", "hold", Outcome.ALLOWED),
        ("root", "hold", Outcome.ALLOWED),
        ("alice", "release", Outcome.REFUSED),
        ("root", "release", Outcome.ALLOWED),
        ("root", "release", Outcome.ALLOWED),
        ("root", "hold", Outcome.REFUSED),
        ("alice", "suspend", Outcome.REFUSED),
    ]
    with ApplianceClient(cluster.running.address, token=t["root"]) as root:

        def seen() -> list[tuple[str, str, Outcome]]:
            events = reversed(root.audit_events(limit=1000))
            return [
                (e.user, e.verb, e.outcome)
                for e in events
                if e.door is Door.GRPC and e.verb in ("hold", "release", "suspend")
            ]

        wait_until(lambda: len(seen()) >= len(expected), 10, "the audit records")
        assert seen() == expected
