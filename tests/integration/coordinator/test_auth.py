"""Bearer tokens over real gRPC: who may do what once authentication is on."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from appliance._proto.v1 import cluster_pb2 as pb
from appliance._proto.v1 import cluster_pb2_grpc, common_pb2, control_pb2
from appliance.domain.inventory import NodeState
from appliance.server.auth import create_token
from tests.integration.coordinator.harness import RunningCoordinator, wait_until
from tests.tls import secure_channel

PARAMS = "model:\n  name: fc_mnist\n  hidden_sizes: [8]\n"
SYSTEMS = ["cs2-01", "cs2-02", "cs2-03", "cs2-04"]
REPLICA_CONTROL = control_pb2.DESCRIPTOR.services_by_name["ReplicaControl"]


class Caller:
    """A stub that sends one user's token with every call."""

    def __init__(self, channel: grpc.Channel, token: str | None) -> None:
        self.channel = channel
        self.stub = cluster_pb2_grpc.ClusterServiceStub(channel)
        self.metadata = (("authorization", f"Bearer {token}"),) if token else ()

    def submit(self, priority: int = 0, user: str = "") -> pb.Job:
        spec = pb.JobSpec(params_yaml=PARAMS, num_csx=1, num_steps=2, priority=priority)
        request = pb.SubmitJobRequest(spec=spec, user=user)
        return self.stub.SubmitJob(request, metadata=self.metadata)

    def cancel(self, job_id: str) -> pb.CancelJobResponse:
        return self.stub.CancelJob(pb.CancelJobRequest(job_id=job_id), metadata=self.metadata)

    def relabel(self, job_id: str) -> pb.Job:
        request = pb.UpdateJobLabelsRequest(job_id=job_id, set={"seen": "yes"})
        return self.stub.UpdateJobLabels(request, metadata=self.metadata)

    def prioritise(self, job_id: str, priority: int) -> pb.Job:
        request = pb.SetJobPriorityRequest(job_id=job_id, priority=priority)
        return self.stub.SetJobPriority(request, metadata=self.metadata)


@pytest.fixture
def callers(tmp_path: Path) -> Iterator[dict[str, Caller]]:
    tokens_file = tmp_path / "tokens.yaml"
    tokens = {
        "alice": create_token(tokens_file, "alice", ["nlp"], admin=False),
        "carol": create_token(tokens_file, "carol", ["nlp"], admin=False),
        "bob": create_token(tokens_file, "bob", ["cv"], admin=False),
        "root": create_token(tokens_file, "root", [], admin=True),
    }
    assert not any(token in tokens_file.read_text() for token in tokens.values())
    running = RunningCoordinator(tmp_path / "data", auth_tokens_file=tokens_file).start()
    running.coordinator.ctx.store.set_node_state(SYSTEMS, NodeState.MAINTENANCE)
    try:
        with secure_channel(running.address) as channel:
            yield {name: Caller(channel, token) for name, token in tokens.items()} | {
                "nobody": Caller(channel, None),
                "forger": Caller(channel, "not-a-real-token"),
            }
    finally:
        running.stop()


def _code(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as info:
        call()  # type: ignore[operator]
    return info.value.code()  # type: ignore[no-any-return]


def test_calls_without_a_valid_token_are_unauthenticated(callers: dict[str, Caller]) -> None:
    for name in ("nobody", "forger"):
        caller = callers[name]
        assert _code(caller.submit) is grpc.StatusCode.UNAUTHENTICATED
        assert _code(
            lambda c=caller: c.stub.ListJobs(pb.ListJobsRequest(), metadata=c.metadata)
        ) is (grpc.StatusCode.UNAUTHENTICATED)
    version = callers["nobody"].stub.GetVersion(pb.GetVersionRequest())
    assert version.version  # the version is public


def test_owners_group_members_and_admins_may_act_others_may_not(
    callers: dict[str, Caller],
) -> None:
    job = callers["alice"].submit(user="mallory")  # the token decides who submits
    assert job.user == "alice"

    assert _code(lambda: callers["bob"].cancel(job.id)) is grpc.StatusCode.PERMISSION_DENIED
    assert _code(lambda: callers["bob"].relabel(job.id)) is grpc.StatusCode.PERMISSION_DENIED
    assert _code(lambda: callers["bob"].prioritise(job.id, common_pb2.PRIORITY_P1)) is (
        grpc.StatusCode.PERMISSION_DENIED
    )
    assert dict(callers["carol"].relabel(job.id).spec.labels) == {"seen": "yes"}  # same group
    assert (
        callers["bob"]
        .stub.GetJob(  # reading is open to every authenticated user
            pb.GetJobRequest(job_id=job.id), metadata=callers["bob"].metadata
        )
        .id
        == job.id
    )

    cancelled = callers["root"].cancel(job.id)
    assert cancelled.changed and cancelled.job.reason == "cancelled by root"


def test_p0_is_admin_only(callers: dict[str, Caller]) -> None:
    assert _code(lambda: callers["alice"].submit(priority=common_pb2.PRIORITY_P0)) is (
        grpc.StatusCode.PERMISSION_DENIED
    )
    job = callers["alice"].submit()
    assert _code(lambda: callers["alice"].prioritise(job.id, common_pb2.PRIORITY_P0)) is (
        grpc.StatusCode.PERMISSION_DENIED
    )
    assert callers["alice"].prioritise(job.id, common_pb2.PRIORITY_P1).spec.priority == (
        common_pb2.PRIORITY_P1
    )
    assert callers["root"].prioritise(job.id, common_pb2.PRIORITY_P0).spec.priority == (
        common_pb2.PRIORITY_P0
    )
    assert callers["root"].submit(priority=common_pb2.PRIORITY_P0).user == "root"


def test_node_states_and_never_preempted_jobs_are_admin_only(callers: dict[str, Caller]) -> None:
    def set_state(who: str, state: str) -> pb.Node:
        request = pb.SetNodeStateRequest(name="cs2-04", state=state, reason="fan")
        return callers[who].stub.SetNodeState(request, metadata=callers[who].metadata)

    with pytest.raises(grpc.RpcError) as refused:
        set_state("alice", "error")
    assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert "only admins may change the state of a node" in (refused.value.details() or "")
    node = set_state("root", "drain")
    assert (node.state, node.reason, node.since > 0) == ("drain", "fan", True)
    events = (
        callers["alice"]
        .stub.GetNodeEvents(
            pb.GetNodeEventsRequest(name="cs2-04"), metadata=callers["alice"].metadata
        )
        .events
    )
    assert [(e.state, e.by, e.reason) for e in events] == [("drain", "root", "fan")]

    spec = pb.JobSpec(params_yaml=PARAMS, num_csx=1, num_steps=2, preemptible=False)
    for who, code in (("alice", grpc.StatusCode.PERMISSION_DENIED), ("root", None)):
        request = pb.SubmitJobRequest(spec=spec)
        submit = lambda: callers[who].stub.SubmitJob(request, metadata=callers[who].metadata)  # noqa: E731, B023
        if code is None:
            assert not submit().spec.preemptible
        else:
            assert _code(submit) is code


@pytest.mark.parametrize(
    "service", [pb.DESCRIPTOR.services_by_name["ClusterService"], REPLICA_CONTROL]
)
def test_every_method_but_get_version_refuses_a_call_without_a_token(
    callers: dict[str, Caller], service: Any
) -> None:
    channel = callers["nobody"].channel
    for method in service.methods:
        path = f"/{service.full_name}/{method.name}"
        call = (channel.unary_stream if method.server_streaming else channel.unary_unary)(path)
        if method.name == "GetVersion":
            assert call(b"", timeout=10)
            continue
        with pytest.raises(grpc.RpcError) as refused:
            result = call(b"", timeout=10)
            if method.server_streaming:
                list(result)
        assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED, path


def test_a_revoked_token_is_refused_within_seconds_without_a_restart(tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens.yaml"
    create_token(tokens_file, "alice", [], admin=False)
    bob = create_token(tokens_file, "bob", [], admin=False)
    running = RunningCoordinator(tmp_path / "data", auth_tokens_file=tokens_file).start()
    try:
        with secure_channel(running.address) as channel:
            caller = Caller(channel, bob)
            listing = lambda: caller.stub.ListJobs(pb.ListJobsRequest(), metadata=caller.metadata)  # noqa: E731
            listing()  # bob is in
            entries = yaml.safe_load(tokens_file.read_text())["tokens"]
            revoked = {"tokens": [e for e in entries if e["user"] != "bob"]}
            tokens_file.write_text(yaml.safe_dump(revoked))
            revoked_at = time.monotonic()
            wait_until(lambda: _refused(listing), 10, "bob's token to be refused")
            assert time.monotonic() - revoked_at < 5
    finally:
        running.stop()


def _refused(call: Any) -> bool:
    try:
        call()
    except grpc.RpcError as exc:
        return exc.code() is grpc.StatusCode.UNAUTHENTICATED  # type: ignore[no-any-return]
    return False


def test_another_groups_job_shows_no_params_and_its_logs_are_refused(
    callers: dict[str, Caller],
) -> None:
    job = callers["alice"].submit()
    mine = callers["carol"].stub.GetJob(
        pb.GetJobRequest(job_id=job.id), metadata=callers["carol"].metadata
    )
    theirs = callers["bob"].stub.GetJob(
        pb.GetJobRequest(job_id=job.id), metadata=callers["bob"].metadata
    )
    assert mine.spec.params_yaml == PARAMS and theirs.spec.params_yaml == ""
    assert mine.spec.model_dir and theirs.spec.model_dir == ""  # where her files are, too
    assert (theirs.id, theirs.user, theirs.phase) == (job.id, "alice", mine.phase)

    def logs(name: str) -> object:
        request = pb.GetJobLogsRequest(job_id=job.id)
        return list(callers[name].stub.GetJobLogs(request, metadata=callers[name].metadata))

    assert logs("carol") == []  # queued: no replicas, nothing to read yet
    assert _code(lambda: logs("bob")) is grpc.StatusCode.PERMISSION_DENIED
    callers["alice"].cancel(job.id)


def test_another_groups_sweep_shows_no_overrides_anywhere(callers: dict[str, Caller]) -> None:
    """A sweep's overrides are its tasks' params values: the owner's group sees them in
    GetArray; another group's user sees the tasks, never the values (GetJob, ListJobs of the
    array, GetArray)."""
    secret = "0.0271828"
    spec = pb.JobSpec(
        params_yaml=PARAMS, num_csx=1, num_steps=2, array="%1",
        sweep={"optimizer.learning_rate": f"{secret},0.5"},
    )  # fmt: skip
    alice = callers["alice"]
    task = alice.stub.SubmitJob(pb.SubmitJobRequest(spec=spec), metadata=alice.metadata)
    bob, carol = callers["bob"], callers["carol"]
    seen_by_bob = [
        bob.stub.GetJob(pb.GetJobRequest(job_id=task.id), metadata=bob.metadata),
        bob.stub.ListJobs(pb.ListJobsRequest(array=task.array_id), metadata=bob.metadata),
        bob.stub.GetArray(pb.GetArrayRequest(array_id=task.array_id), metadata=bob.metadata),
    ]
    assert len(seen_by_bob[2].tasks) == 2  # he sees the tasks ...
    assert all(secret.encode() not in m.SerializeToString() for m in seen_by_bob)  # not values
    view = carol.stub.GetArray(pb.GetArrayRequest(array_id=task.array_id), metadata=carol.metadata)
    assert view.tasks[0].overrides["optimizer.learning_rate"] == secret
    alice.cancel(task.array_id)
