"""The replicas of a job take data-plane calls only from callers holding the job's certificate
and token.

A stranger who can reach a replica's port (another user's process on the host, another pod)
calls every data-plane method of every replica of a running job: with no certificate or one
the coordinator's CA did not sign, the TLS handshake fails; with a certificate of the CA but of
another job or attempt, each call is refused with UNAUTHENTICATED even with the job's token;
with the job's certificate but a forged token, UNAUTHENTICATED. The job trains on. The same
Shutdown with the job's certificate and token is obeyed, which shows the refusals were about
the credentials and not about the call.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest

from appliance._proto.v1 import control_pb2, dataplane_pb2_grpc
from appliance._proto.v1 import dataplane_pb2 as pb
from appliance.client import ApplianceClient
from appliance.domain.auth import ATTEMPT_ENV, DATAPLANE_TOKEN_ENV
from appliance.domain.phases import Phase
from appliance.domain.replica_identity import REPLICA_CERT_ENV, REPLICA_KEY_ENV, job_tls_name
from appliance.server.pki import CertificateAuthority
from appliance.server.replica_identity import ReplicaIdentities
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


def certificate_channel(
    address: str, job_id: str, identity: Mapping[str, str] | None, ca: bytes
) -> grpc.Channel:
    """A channel that verifies the replica as one of the job's first attempt (as a peer does)
    and presents `identity`'s certificate (None: none)."""
    key = cert = None
    if identity is not None:
        key, cert = identity[REPLICA_KEY_ENV].encode(), identity[REPLICA_CERT_ENV].encode()
    credentials = grpc.ssl_channel_credentials(ca, private_key=key, certificate_chain=cert)
    options = [("grpc.ssl_target_name_override", job_tls_name(job_id, 1))]
    return grpc.secure_channel(address, credentials, options=options)


def test_strangers_are_refused_by_every_replica_and_the_job_trains_on(
    client: ApplianceClient,
    coordinator: RunningCoordinator,
    running_job: tuple[str, dict[str, str], int],
    tmp_path: Path,
) -> None:
    job_id, addresses, step = running_job
    assert set(addresses) == {"chief-0", "cs2-0", "cs2-1", "memoryx-0", "swarmx-0"}
    tokens = ReplicaTokens.from_key_file(coordinator.settings.auth.replica_key_file)
    tls = coordinator.coordinator.tls
    assert tls is not None and tls.ca is not None
    ca, signer = tls.ca_pem, ReplicaIdentities(tls.ca)
    own = (("authorization", f"Bearer {tokens.dataplane_token(job_id)}"),)
    # Certificates a stranger may hold, each presented with the job's own token.
    other_ca = ReplicaIdentities(CertificateAuthority.load_or_create(tmp_path / "other-ca"))
    unsigned = {
        "no certificate": None,
        "a certificate of another CA": other_ca.environment(job_id, 1, "cs2-0"),
    }
    of_the_ca = {
        "another job's certificate": signer.environment("wsjob-someoneelse000", 1, "cs2-0"),
        "another attempt's certificate": signer.environment(job_id, 2, "cs2-0"),
    }
    for replica, address in addresses.items():
        with grpc.insecure_channel(address) as channel:  # plaintext: no handshake at all
            assert attempt(channel, own) == {"UNAVAILABLE"}, f"{replica} in plaintext"
        for what, identity in unsigned.items():  # the handshake fails
            with certificate_channel(address, job_id, identity, ca) as channel:
                assert attempt(channel, own) == {"UNAVAILABLE"}, f"{replica} with {what}"
        for what, identity in of_the_ca.items():  # refused by the replica, the request unread
            with certificate_channel(address, job_id, identity, ca) as channel:
                codes = attempt(channel, own)
                assert "UNAUTHENTICATED" in codes, f"{replica} with {what}: {codes}"
                assert codes <= {"UNAUTHENTICATED", "UNIMPLEMENTED"}, f"{replica}: {codes}"
    # The job's own certificate, with a forged token: the token is a second factor.
    ours = signer.environment(job_id, 1, "cs2-0")
    forged = {
        "no token": None,
        "the job's replica token": tokens.token_for(job_id, 1),
        "another job's token": tokens.dataplane_token("wsjob-someoneelse000"),
        "another attempt's token": tokens.dataplane_token(job_id, attempt=2),
        "a long header": "x" * 4000,  # (gRPC itself refuses one over 8 KiB)
    }
    for replica, address in addresses.items():
        with certificate_channel(address, job_id, ours, ca) as channel:
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

    # With the job's own certificate and token the very same call is obeyed: it was them.
    with certificate_channel(addresses["cs2-1"], job_id, ours, ca) as channel:
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


@pytest.mark.parametrize(
    ("attempt_given", "drop", "said"),
    [
        ("1", REPLICA_KEY_ENV, "APPLIANCE_REPLICA_KEY not set"),
        ("2", "", "APPLIANCE_REPLICA_CERT is not a certificate for wsjob-x.a2.replica.appliance"),
    ],
    ids=["a part missing", "another attempt's"],
)
def test_a_replica_with_a_wrong_identity_does_not_start(
    tmp_path: Path, attempt_given: str, drop: str, said: str
) -> None:
    identity = ReplicaIdentities(CertificateAuthority.load_or_create(tmp_path / "ca"))
    env = {
        "PATH": "/usr/bin:/bin", DATAPLANE_TOKEN_ENV: "t0k", ATTEMPT_ENV: attempt_given,
        **identity.environment("wsjob-x", 1, "cs2-0"),
    }  # fmt: skip
    env.pop(drop, None)
    run = subprocess.run(
        [sys.executable, "-m", "appliance.workers", "cs2", "--job-id", "wsjob-x",
         "--replica", "cs2-0", "--coordinator", "127.0.0.1:1"],
        capture_output=True, text=True, timeout=60, env=env,
        cwd=Path(__file__).resolve().parents[3],
    )  # fmt: skip
    assert run.returncode == 2
    assert said in run.stderr
    assert "Traceback" not in run.stderr
