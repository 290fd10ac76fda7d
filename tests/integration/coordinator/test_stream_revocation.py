"""A token revoked while its holder streams ends the stream: gRPC WatchJob and REST SSE stop
at their next message with UNAUTHENTICATED, instead of delivering for as long as the job runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
import yaml

from appliance._proto.v1 import cluster_pb2 as pb
from appliance._proto.v1 import cluster_pb2_grpc
from appliance.client import ApplianceClient
from appliance.server.auth import create_token
from tests.integration.coordinator.harness import RunningCoordinator, serving, wait_until
from tests.tls import secure_channel

PARAMS = {"model": {"name": "fc_mnist", "hidden_sizes": [8]}}


@pytest.fixture
def bobs_coordinator(tmp_path: Path) -> Iterator[tuple[RunningCoordinator, str, Path]]:
    tokens_file = tmp_path / "tokens.yaml"
    root = create_token(tokens_file, "root", [], admin=True)
    bob = create_token(tokens_file, "bob", ["cv"], admin=False)
    with serving(tmp_path / "data", auth_tokens_file=tokens_file) as running:
        yield running, bob, tokens_file
        with ApplianceClient(running.address, token=root) as admin:  # end bob's long job
            for job in admin.list_jobs():
                admin.job(job.id).cancel()


def test_streams_end_once_the_token_is_revoked(
    bobs_coordinator: tuple[RunningCoordinator, str, Path],
) -> None:
    running, bob, tokens_file = bobs_coordinator
    with ApplianceClient(running.address, token=bob, detach=True) as client:
        job = client.submit(params=PARAMS, num_csx=1, num_steps=1_000_000)
        wait_until(lambda: job.status.progress.step >= 1, 60, "the job to train")

        seen = {"grpc": 0, "sse": 0}
        ended: dict[str, str] = {}
        opened = threading.Barrier(3)

        def watch() -> None:
            with secure_channel(running.address) as channel:
                stub = cluster_pb2_grpc.ClusterServiceStub(channel)
                metadata = (("authorization", f"Bearer {bob}"),)
                stream = stub.WatchJob(pb.WatchJobRequest(job_id=job.id), metadata=metadata)
                opened.wait()
                try:
                    for _ in stream:
                        seen["grpc"] += 1
                    ended["grpc"] = "ended"
                except grpc.RpcError as err:
                    ended["grpc"] = err.code().name

        def sse() -> None:
            url = f"https://127.0.0.1:{running.coordinator.http_port}/api/v1/jobs/{job.id}"
            headers = {"Authorization": f"Bearer {bob}"}
            with httpx.stream("GET", f"{url}/events/stream", headers=headers, timeout=60) as r:
                opened.wait()
                for line in r.iter_lines():
                    if line.startswith("event: error"):
                        ended["sse"] = "error"
                    elif '"unauthenticated"' in line:
                        ended["sse"] += " unauthenticated"
                    elif line.startswith("data: "):
                        seen["sse"] += 1
                ended.setdefault("sse", "ended")

        threads = [threading.Thread(target=watch), threading.Thread(target=sse)]
        for thread in threads:
            thread.start()
        opened.wait()
        wait_until(lambda: seen["grpc"] > 0 and seen["sse"] > 0, 30, "both streams to deliver")
        entries = yaml.safe_load(tokens_file.read_text())["tokens"]
        tokens_file.write_text(
            yaml.safe_dump({"tokens": [e for e in entries if e["user"] != "bob"]})
        )
        revoked_at = time.monotonic()
        for thread in threads:
            thread.join(30)
        assert not any(thread.is_alive() for thread in threads), (seen, ended)
        assert time.monotonic() - revoked_at < 10
        assert ended == {"grpc": "UNAUTHENTICATED", "sse": "error unauthenticated"}, ended
