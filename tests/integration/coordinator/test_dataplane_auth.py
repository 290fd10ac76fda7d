"""The replicas of a job take data-plane calls only from callers holding the job's token.

A stranger who can reach a replica's port (another user's process on the host, another pod)
calls every data-plane method of every replica of a running job: each call is refused with
UNAUTHENTICATED and the job trains on. The same Shutdown with the job's token is obeyed, which
shows the refusals were about the token and not about the call.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from appliance._proto.v1 import control_pb2, dataplane_pb2_grpc
from appliance._proto.v1 import dataplane_pb2 as pb
from appliance.client import ApplianceClient
from appliance.domain.phases import Phase
from appliance.server.replica_tokens import ReplicaTokens
from tests.integration.coordinator.harness import RunningCoordinator, wait_until

# Every method of the data plane, with a request a stranger could send.
UNARY = {
    "/appliance.v1.ReplicaLifecycle/Configure": control_pb2.Topology(job_id="x"),
    "/appliance.v1.ReplicaLifecycle/Shutdown": pb.ShutdownRequest(reason="owned"),
    "/appliance.v1.StepExecution/RunStep": pb.RunStepRequest(step=1),
    "/appliance.v1.UpdateControl/GradientNorms": pb.GradientNormsRequest(step=1),
    "/appliance.v1.UpdateControl/ApplyUpdates": pb.ApplyUpdatesRequest(learning_rate=1e9),
}
STREAMED = {
    "/appliance.v1.WeightStreaming/StreamWeights": pb.WeightsRequest(layer=0),
    "/appliance.v1.WeightStreaming/StreamStepWeights": pb.StepWeightsRequest(layers=[0]),
}
PUSH = "/appliance.v1.WeightStreaming/PushGradients"


def attempt(channel: grpc.Channel, metadata: tuple[tuple[str, str], ...] | None) -> set[str]:
    """Call every method; the status codes seen."""
    codes = set()
    for name, message in UNARY.items():
        method = channel.unary_unary(name, request_serializer=bytes)
        codes.add(_code(method, message.SerializeToString(), metadata))
    for name, message in STREAMED.items():
        stream = channel.unary_stream(name, request_serializer=bytes)
        codes.add(_code(functools.partial(_drain, stream), message.SerializeToString(), metadata))
    push = channel.stream_unary(PUSH, request_serializer=bytes)
    junk = iter([b"\x08\x01\x10\x00" + b"\xff" * 64, b"gradients of nobody"])
    codes.add(_code(push, junk, metadata))
    return codes


def _drain(stream: Any, request: bytes, **options: Any) -> None:
    for _ in stream(request, **options):
        pass


def _code(call: Any, request: Any, metadata: tuple[tuple[str, str], ...] | None) -> str:
    try:
        call(request, timeout=5, metadata=metadata)
    except grpc.RpcError as err:
        return err.code().name  # type: ignore[no-any-return]
    return "OK"


@pytest.fixture
def running_job(
    client: ApplianceClient, params_file: Path
) -> Iterator[tuple[str, dict[str, str], int]]:
    job = client.submit(params=params_file, num_csx=2, num_steps=100_000)
    wait_until(lambda: job.status.progress.step >= 1, 60, "the job to train")
    status = job.status
    assert status.phase is Phase.RUNNING
    yield job.id, {r.name: r.address for r in status.replicas}, status.progress.step
    job.cancel()


def test_strangers_are_refused_by_every_replica_and_the_job_trains_on(
    client: ApplianceClient,
    coordinator: RunningCoordinator,
    running_job: tuple[str, dict[str, str], int],
) -> None:
    job_id, addresses, step = running_job
    assert set(addresses) == {"chief-0", "cs2-0", "cs2-1", "memoryx-0", "swarmx-0"}
    tokens = ReplicaTokens.from_key_file(coordinator.settings.auth.replica_key_file)
    forged = {
        "no token": None,
        "the job's replica token": tokens.token_for(job_id, 1),
        "another job's token": tokens.dataplane_token("wsjob-someoneelse000"),
        "another attempt's token": tokens.dataplane_token(job_id, attempt=2),
        "a long header": "x" * 4000,  # (gRPC itself refuses one over 8 KiB)
    }
    for replica, address in addresses.items():
        with grpc.insecure_channel(address) as channel:
            for what, token in forged.items():
                metadata = None if token is None else (("authorization", f"Bearer {token}"),)
                codes = attempt(channel, metadata)
                # Refused; a method the replica's role does not serve is simply not there.
                assert "UNAUTHENTICATED" in codes, f"{replica} with {what}: {codes}"
                assert codes <= {"UNAUTHENTICATED", "UNIMPLEMENTED"}, f"{replica}: {codes}"

    job = client.job(job_id)
    wait_until(lambda: job.status.progress.step > step + 5, 60, "the job to train on")
    status = job.status
    assert status.phase is Phase.RUNNING, status.reason
    assert {r.name for r in status.replicas if r.exit_code is not None} == set()

    # With the job's own data-plane token the very same call is obeyed: it was the token.
    own = (("authorization", f"Bearer {tokens.dataplane_token(job_id)}"),)
    with grpc.insecure_channel(addresses["cs2-1"]) as channel:
        stub = dataplane_pb2_grpc.ReplicaLifecycleStub(channel)
        stub.Shutdown(pb.ShutdownRequest(reason="asked by the test"), timeout=5, metadata=own)
    wait_until(lambda: job.status.phase is Phase.FAILED, 60, "the shut-down replica to fail it")


def test_a_replica_without_its_jobs_token_does_not_start(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "appliance.workers", "cs2", "--job-id", "wsjob-x",
         "--replica", "cs2-0", "--coordinator", "127.0.0.1:1"],
        capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"},
        cwd=Path(__file__).resolve().parents[3],
    )  # fmt: skip
    assert run.returncode == 2
    assert "APPLIANCE_DATAPLANE_TOKEN is not set" in run.stderr
    assert "Traceback" not in run.stderr
