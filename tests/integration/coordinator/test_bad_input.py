"""Bad input over real gRPC: INVALID_ARGUMENT naming the field, NOT_FOUND, and nothing stored."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from appliance._proto.v1 import cluster_pb2 as pb
from appliance._proto.v1 import cluster_pb2_grpc
from appliance.client import ApplianceClient
from appliance.domain.phases import Phase
from appliance.protocol.errors import FIELD_KEY
from tests.integration.coordinator.harness import RunningCoordinator
from tests.tls import secure_channel

GOOD = "model:\n  name: fc_mnist\n  hidden_sizes: [8]\n"
# Params that crashed (SIGSEGV), or failed with INTERNAL, before their shape was bounded.
HOSTILE_PARAMS = [
    ("model: " + "[" * 25_000 + "]" * 25_000, "nests deeper than 64 levels"),
    ("model: " + "{a: " * 1000 + "1" + "}" * 1000, "nests deeper than 64 levels"),
    ("model: {name: " + "9" * 5000 + "}", "longer than 4096 characters"),
    ("model: {name: fc_mnist, when: 2001-13-45}", "cannot be read (ValueError)"),
    ("a: &a [1, 1]\nb: &b [*a, *a]\nmodel: {n: *b}\n", "*a names a mapping or a list"),
]


@pytest.fixture
def stub(coordinator: RunningCoordinator) -> Iterator[cluster_pb2_grpc.ClusterServiceStub]:
    with secure_channel(coordinator.address) as channel:
        yield cluster_pb2_grpc.ClusterServiceStub(channel)


PIPELINED = "model: {name: fc_mnist}\nrunconfig: {execution_strategy: pipeline}\n"


def _spec(**fields: object) -> pb.JobSpec:
    values: dict[str, object] = {"params_yaml": GOOD, "num_csx": 1, "num_steps": 10}
    values.update(fields)
    return pb.JobSpec(**values)  # type: ignore[arg-type]


BAD_SPECS = [
    ("num_csx", _spec(num_csx=0), "num_csx must be a positive integer"),
    ("num_csx", _spec(num_csx=-3), "num_csx must be a positive integer"),
    ("num_csx", _spec(num_csx=5), "more than the 4 CS-2 systems"),
    ("num_csx", _spec(num_csx=6, num_csx_min=2), "more than the 4 CS-2 systems"),  # elastic
    ("num_csx_min", _spec(num_csx=2, num_csx_min=3), "num_csx_min must be from 1 to num_csx"),
    ("num_csx_min", _spec(num_csx=4, num_csx_min=-1), "num_csx_min must be from 1 to num_csx"),
    ("num_csx_min", _spec(num_csx=2, num_csx_min=1, params_yaml=PIPELINED), "cannot be elastic"),
    ("num_steps", _spec(num_steps=0), "num_steps must be between"),
    ("num_steps", _spec(num_steps=10**12), "num_steps must be between"),
    ("mode", _spec(mode=42), "mode 42 is not a known mode"),
    ("priority", _spec(priority=9), "priority 9 is not one of"),
    ("params", _spec(params_yaml=""), "params is empty"),
    ("params", _spec(params_yaml="model: [unclosed"), "params is not valid YAML"),
    ("params", _spec(params_yaml="- just\n- a list\n"), "must be a YAML mapping"),
    ("params", _spec(params_yaml="model: {}\nbogus: {}\n"), "unknown section(s) bogus"),
    ("params", _spec(params_yaml="train_input: {}\n"), "needs a non-empty `model` section"),
    ("params", _spec(params_yaml="model: {name: bert}\n"), "model.name 'bert' is not known"),
    ("params", _spec(params_yaml="model: {a: " + "x" * (1 << 20) + "}"), "larger than"),
    *[("params", _spec(params_yaml=text), says) for text, says in HOSTILE_PARAMS],
    ("labels", _spec(labels={"bad key!": "v"}), "label key 'bad key!'"),
    ("labels", _spec(labels={"team": "-nope"}), "label value '-nope'"),
    ("labels", _spec(labels={"k": "v" * 64}), "at most 63 characters"),
    ("labels", _spec(labels={"Bad_Prefix/k": "v"}), "invalid prefix"),
    ("model_dir", _spec(model_dir="d" * 5000), "model_dir must be a path"),
    ("model_dir", _spec(model_dir="relative/dir"), "must be an absolute path"),
]


@pytest.mark.parametrize(
    ("field", "spec", "message"), BAD_SPECS, ids=[b[2][:30] for b in BAD_SPECS]
)
def test_invalid_spec_is_rejected_naming_the_field_and_nothing_is_stored(
    stub: cluster_pb2_grpc.ClusterServiceStub, field: str, spec: pb.JobSpec, message: str
) -> None:
    with pytest.raises(grpc.RpcError) as info:
        stub.SubmitJob(pb.SubmitJobRequest(spec=spec, user="alice"))
    error = info.value
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert message in error.details()
    assert (FIELD_KEY, field) in tuple(error.trailing_metadata())
    assert list(stub.ListJobs(pb.ListJobsRequest(all=True)).jobs) == []


@pytest.mark.parametrize(("text", "says"), HOSTILE_PARAMS, ids=[h[1][:20] for h in HOSTILE_PARAMS])
def test_hostile_params_to_compile_are_refused_and_the_coordinator_stays_up(
    stub: cluster_pb2_grpc.ClusterServiceStub, text: str, says: str
) -> None:
    request = pb.CompileJobRequest(spec=_spec(params_yaml=text))
    with pytest.raises(grpc.RpcError) as info:
        stub.CompileJob(request, timeout=30)
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert says in info.value.details()
    assert (FIELD_KEY, "params") in tuple(info.value.trailing_metadata())
    assert stub.GetVersion(pb.GetVersionRequest(), timeout=10).version


def test_invalid_user_is_rejected(stub: cluster_pb2_grpc.ClusterServiceStub) -> None:
    with pytest.raises(grpc.RpcError) as info:
        stub.SubmitJob(pb.SubmitJobRequest(spec=_spec(), user="not a user;"))
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize("method", ["GetJob", "CancelJob", "GetJobEvents"])
def test_unknown_job_is_not_found(stub: cluster_pb2_grpc.ClusterServiceStub, method: str) -> None:
    request = {
        "GetJob": pb.GetJobRequest, "CancelJob": pb.CancelJobRequest,
        "GetJobEvents": pb.GetJobEventsRequest,
    }[method](job_id="wsjob-doesnotexist00")  # fmt: skip
    with pytest.raises(grpc.RpcError) as info:
        getattr(stub, method)(request)
    assert info.value.code() is grpc.StatusCode.NOT_FOUND
    assert "wsjob-doesnotexist00 not found" in info.value.details()


def test_watch_unknown_job_is_not_found(stub: cluster_pb2_grpc.ClusterServiceStub) -> None:
    with pytest.raises(grpc.RpcError) as info:
        list(stub.WatchJob(pb.WatchJobRequest(job_id="wsjob-doesnotexist00"), timeout=10))
    assert info.value.code() is grpc.StatusCode.NOT_FOUND


def test_malformed_job_id_and_page_token_are_invalid(
    stub: cluster_pb2_grpc.ClusterServiceStub,
) -> None:
    with pytest.raises(grpc.RpcError) as info:
        stub.GetJob(pb.GetJobRequest(job_id="../../etc/passwd"))
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as info:
        stub.ListJobs(pb.ListJobsRequest(page_token="garbage"))
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_cancelling_a_finished_job_changes_nothing(
    client: ApplianceClient, stub: cluster_pb2_grpc.ClusterServiceStub, tmp_path: Path
) -> None:
    params = tmp_path / "params.yaml"
    params.write_text(GOOD)
    job = client.submit(params=params, num_csx=1, num_steps=2)
    final = job.wait(timeout=60)
    assert final.phase is Phase.SUCCEEDED
    reply = stub.CancelJob(pb.CancelJobRequest(job_id=job.id))
    assert not reply.changed and reply.message.endswith("already SUCCEEDED; nothing to cancel")
    assert client.get_job(job.id).phase is Phase.SUCCEEDED
    assert len(client.events(job.id)) == 5
