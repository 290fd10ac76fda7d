"""With authentication on, ReplicaControl takes only a job's own replica token."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from appliance._proto.v1 import control_pb2, control_pb2_grpc
from appliance.client import ApplianceClient
from appliance.domain.phases import Phase
from appliance.server.auth import create_token
from appliance.server.replica_tokens import ReplicaTokens
from tests.integration.coordinator.harness import RunningCoordinator, wait_until
from tests.tls import secure_channel

PARAMS = {"model": {"name": "fc_mnist", "hidden_sizes": [8]}}


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[RunningCoordinator, str]]:
    tokens_file = tmp_path / "tokens.yaml"
    alice = create_token(tokens_file, "alice", ["nlp"], admin=False)
    running = RunningCoordinator(tmp_path / "data", auth_tokens_file=tokens_file).start()
    try:
        yield running, alice
    finally:
        running.stop()


def test_replicas_authenticate_with_their_jobs_token_and_nobody_else_can(
    secured: tuple[RunningCoordinator, str],
) -> None:
    running, alice = secured
    with ApplianceClient(running.address, token=alice, detach=True) as client:
        job = client.submit(params=PARAMS, num_csx=1, num_steps=5)
        other = client.submit(params=PARAMS, num_csx=1, num_steps=5)
        # Its replicas registered, awaited their peers, reported progress: all authenticated.
        assert job.wait(timeout=120).phase is Phase.SUCCEEDED
        wait_until(lambda: other.status.phase.terminal, 120, "the other job to end")

    key = running.settings.auth.replica_key_file
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    tokens = ReplicaTokens.from_key_file(
        running.settings.auth.replica_key_file
    )  # the same key, read back
    request = control_pb2.HeartbeatRequest(job_id=job.id, replica="cs2-0", attempt=1)
    with secure_channel(running.address) as channel:
        stub = control_pb2_grpc.ReplicaControlStub(channel)

        def heartbeat(token: str | None) -> grpc.StatusCode:
            metadata = (("authorization", f"Bearer {token}"),) if token is not None else None
            try:
                stub.Heartbeat(request, timeout=10, metadata=metadata)
            except grpc.RpcError as err:
                return err.code()  # type: ignore[no-any-return]
            return grpc.StatusCode.OK

        assert heartbeat(tokens.token_for(job.id, 1)) is grpc.StatusCode.OK
        # The token of another attempt of the same job is not this attempt's.
        assert heartbeat(tokens.token_for(job.id, 2)) is grpc.StatusCode.UNAUTHENTICATED
        assert heartbeat(None) is grpc.StatusCode.UNAUTHENTICATED
        assert heartbeat(alice) is grpc.StatusCode.UNAUTHENTICATED  # a user's token is not one
        assert heartbeat(tokens.token_for(other.id, 1)) is grpc.StatusCode.UNAUTHENTICATED
        forged = control_pb2.ReportProgressRequest(job_id=job.id)
        with pytest.raises(grpc.RpcError) as refused:
            stub.ReportProgress(forged, timeout=10)
        assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
