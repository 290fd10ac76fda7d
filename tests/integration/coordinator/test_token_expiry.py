"""Expiring and revoked tokens on a real coordinator: a token that expires while its holder
watches a job ends the gRPC stream with UNAUTHENTICATED and the REST event stream with an error
event within about a second of its expiry
(the stream re-checks its caller on its own, it does not wait for a message), saying it
expired; a token revoked with `appliance token revoke` is refused within about a second on
gRPC and REST."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from appliance._proto.v1 import cluster_pb2 as pb
from appliance._proto.v1 import cluster_pb2_grpc
from appliance.client import ApplianceClient
from appliance.domain.auth import Principal
from appliance.domain.inventory import NodeState
from appliance.server.tokens_file import add_token, read_entries
from tests import timing
from tests.integration.coordinator.harness import RunningCoordinator, serving, wait_until
from tests.tls import secure_channel

PARAMS = {"model": {"name": "fc_mnist", "hidden_sizes": [8]}}
BOB = Principal("bob", ("cv",), admin=False)
SYSTEMS = ["cs2-01", "cs2-02", "cs2-03", "cs2-04"]


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[tuple[RunningCoordinator, Path, str]]:
    tokens_file = tmp_path / "tokens.yaml"
    root, _ = add_token(tokens_file, Principal("root", (), admin=True), ttl=None)
    with serving(tmp_path / "data", auth_tokens_file=tokens_file) as running:
        yield running, tokens_file, root
        with ApplianceClient(running.address, token=root) as admin:  # end the long jobs
            for job in admin.list_jobs():
                admin.job(job.id).cancel()


def _get_job(address: str, token: str, job_id: str) -> grpc.StatusCode:
    with secure_channel(address) as channel:
        stub = cluster_pb2_grpc.ClusterServiceStub(channel)
        try:
            stub.GetJob(pb.GetJobRequest(job_id=job_id), metadata=_bearer(token), timeout=10)
        except grpc.RpcError as err:
            return err.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def _bearer(token: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {token}"),)


def test_a_token_expiring_mid_watch_ends_the_stream_within_a_second(
    coordinator: tuple[RunningCoordinator, Path, str],
) -> None:
    running, tokens_file, root = coordinator
    # Every system down for maintenance: the job waits in the queue and its streams stay quiet
    # after their first message, so only the streams' own re-check can end them.
    running.coordinator.ctx.store.set_node_state(SYSTEMS, NodeState.MAINTENANCE)
    with ApplianceClient(running.address, token=root, detach=True) as client:
        job = client.submit(params=PARAMS, num_csx=1, num_steps=1_000_000)
    # Room to open both streams well before the expiry on a busy machine.
    short, entry = add_token(tokens_file, BOB, ttl=timing.scaled(8.0))
    assert entry.expires is not None
    wait_until(
        lambda: _get_job(running.address, short, job.id) == grpc.StatusCode.OK,
        10, "the coordinator to take the new token",
    )  # fmt: skip
    ended: dict[str, object] = {}
    seen: list[float] = []
    opened = threading.Event()

    def watch() -> None:
        with secure_channel(running.address) as channel:
            stub = cluster_pb2_grpc.ClusterServiceStub(channel)
            stream = stub.WatchJob(pb.WatchJobRequest(job_id=job.id), metadata=_bearer(short))
            try:
                for _ in stream:
                    seen.append(time.time())
                    opened.set()
            except grpc.RpcError as err:
                ended.update(code=err.code(), details=err.details(), at=time.time())

    sse_ended: dict[str, object] = {}
    sse_opened = threading.Event()

    def sse() -> None:
        url = f"https://127.0.0.1:{running.coordinator.http_port}/api/v1/jobs/{job.id}"
        headers = {"Authorization": f"Bearer {short}"}
        with httpx.stream("GET", f"{url}/events/stream", headers=headers, timeout=60) as r:
            sse_opened.set()
            for line in r.iter_lines():
                if "expired at" in line:
                    sse_ended.update(line=line, at=time.time())

    threads = [threading.Thread(target=watch), threading.Thread(target=sse)]
    for thread in threads:
        thread.start()
    wait_until(lambda: opened.is_set() and sse_opened.is_set(), 30, "the streams to open")
    assert time.time() < entry.expires, "the streams must open before the token expires"
    for thread in threads:
        thread.join(timing.scaled(30.0))
    assert not any(thread.is_alive() for thread in threads)
    assert ended["code"] == grpc.StatusCode.UNAUTHENTICATED, ended
    assert f"token {entry.id} expired at" in str(ended["details"])
    assert '"unauthenticated"' in str(sse_ended["line"])
    assert seen[-1] < entry.expires - 1, "the watch was quiet before the expiry"
    for at in (ended["at"], sse_ended["at"]):
        late = float(at) - entry.expires  # type: ignore[arg-type]
        assert -0.1 < late < timing.scaled(1.2), f"a stream ended {late:.2f} s after the expiry"
    assert _get_job(running.address, short, job.id) == grpc.StatusCode.UNAUTHENTICATED
    rest = httpx.get(
        f"https://127.0.0.1:{running.coordinator.http_port}/api/v1/jobs/{job.id}",
        headers={"Authorization": f"Bearer {short}"},
    )
    assert rest.status_code == 401 and "expired at" in rest.json()["error"]["message"]


def test_a_token_revoked_with_the_command_is_refused_within_a_second(
    coordinator: tuple[RunningCoordinator, Path, str],
) -> None:
    running, tokens_file, _ = coordinator
    bob, entry = add_token(tokens_file, BOB, ttl=3600)
    url = f"https://127.0.0.1:{running.coordinator.http_port}/api/v1/jobs"
    headers = {"Authorization": f"Bearer {bob}"}
    wait_until(lambda: httpx.get(url, headers=headers).status_code == 200, 10, "bob's token")
    command = [str(Path(sys.executable).with_name("appliance")), "token", "revoke", entry.id]
    said = subprocess.run(
        [*command, "--file", str(tokens_file)], capture_output=True, text=True, check=True
    )
    revoked_at = time.monotonic()
    assert said.stdout == f"token {entry.id} of bob revoked\n"
    assert entry.id not in [e.id for e in read_entries(tokens_file)]

    def refused() -> bool:
        grpc_code = _get_job(running.address, bob, "wsjob-none")
        return grpc_code == grpc.StatusCode.UNAUTHENTICATED and (
            httpx.get(url, headers=headers).status_code == 401
        )

    wait_until(refused, 10, "the revoked token to be refused")
    assert time.monotonic() - revoked_at < timing.scaled(1.0)
