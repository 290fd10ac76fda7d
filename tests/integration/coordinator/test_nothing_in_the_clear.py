"""Nothing in the clear: a capture of every byte on the loopback interface during a whole job
(submit, watch, logs, REST, the replicas' control and data planes) holds no token and no params
bytes. The same run with the coordinator on --insecure finds them: the search can see them.

The capture is an AF_PACKET socket on `lo` (root only, as tcpdump would need); a bearer token
in gRPC metadata may travel HPACK-Huffman-coded, so each secret is searched for as it is and in
that coding.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hpack.huffman import HuffmanEncoder
from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH

from appliance.client import ApplianceClient
from appliance.domain.phases import Phase
from appliance.server.replica_tokens import ReplicaTokens
from tests.integration.coordinator.harness import serving, user_tokens

ETH_P_ALL = 0x0003
MAX_CAPTURED = 1 << 30
# A value only this job's params hold: found in the clear only if params travel in the clear.
MARKER_RATE = "0.0512347"
PARAMS = f"""
model: {{name: fc_mnist, input_size: 784, hidden_sizes: [32], num_classes: 10}}
train_input: {{batch_size: 16}}
optimizer: {{optimizer_type: sgd, learning_rate: {MARKER_RATE}}}
runconfig: {{seed: 7, log_steps: 5}}
"""
HUFFMAN = HuffmanEncoder(REQUEST_CODES, REQUEST_CODES_LENGTH)


class LoopbackCapture:
    """Every frame on `lo` while running (both directions: each is seen once per socket end)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.bind(("lo", 0))
        self.sock.settimeout(0.2)
        self.frames: list[bytes] = []
        self._size = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                frame = self.sock.recv(1 << 17)
            except TimeoutError:
                continue
            if self._size + len(frame) <= MAX_CAPTURED:
                self.frames.append(frame)
                self._size += len(frame)

    @contextlib.contextmanager
    def running(self) -> Iterator[LoopbackCapture]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(5)
            self.sock.close()

    def holds(self, secret: str) -> bool:
        """Whether `secret` (or its HPACK Huffman coding) crossed the loopback."""
        forms = [secret.encode(), HUFFMAN.encode(secret.encode())]
        data = b"".join(self.frames)
        return any(form in data for form in forms)


def whole_job(
    tmp_path: Path, insecure: bool, data_plane: str = "shared-memory"
) -> tuple[LoopbackCapture, list[str]]:
    """A job through every door with authentication on, captured; the secrets it used."""
    if os.geteuid() != 0:
        pytest.skip("capturing the loopback needs root (an AF_PACKET socket)")
    tokens_file = tmp_path / "tokens.yaml"
    tokens = user_tokens(tokens_file, ["alice"])
    capture = LoopbackCapture()
    with (
        serving(
            tmp_path / "data",
            auth_tokens_file=tokens_file,
            insecure=insecure,
            worker_data_plane=data_plane,
        ) as running,
        capture.running(),
        ApplianceClient(
            running.address, token=tokens["alice"], insecure=insecure or None
        ) as client,
    ):
        params = tmp_path / "params.yaml"
        params.write_text(PARAMS)
        job = client.submit(params=params, num_csx=1, num_steps=20, detach=True)
        final = job.wait(timeout=120)
        assert final.phase is Phase.SUCCEEDED, final.reason
        assert list(job.logs(replica="chief-0"))
        scheme = "http" if insecure else "https"
        url = f"{scheme}://127.0.0.1:{running.coordinator.http_port}/api/v1/jobs/{job.id}"
        headers = {"Authorization": f"Bearer {tokens['alice']}"}
        assert httpx.get(url, headers=headers, timeout=10).status_code == 200
        key = running.settings.auth.replica_key_file
        replica = ReplicaTokens.from_key_file(key)
        secrets = [
            tokens["alice"],
            replica.token_for(job.id, final.attempt),
            replica.dataplane_token(job.id, final.attempt),
        ]
    return capture, secrets


@pytest.mark.parametrize("data_plane", ["shared-memory", "grpc"])
def test_a_whole_job_crosses_the_loopback_encrypted(tmp_path: Path, data_plane: str) -> None:
    capture, secrets = whole_job(tmp_path, insecure=False, data_plane=data_plane)
    assert capture.frames, "nothing captured"
    names = ["the user's token", "the replica token", "the data-plane token"]
    leaked = [name for name, secret in zip(names, secrets, strict=True) if capture.holds(secret)]
    assert not leaked, f"in the clear on the loopback: {leaked}"
    assert not capture.holds(MARKER_RATE), "the job's params crossed the loopback in the clear"


def test_the_capture_sees_plaintext(tmp_path: Path) -> None:
    """The same job on --insecure, its replicas on gRPC: the tokens and the params are found,
    so the check above would see them if TLS let them through."""
    capture, secrets = whole_job(tmp_path, insecure=True, data_plane="grpc")
    assert [capture.holds(secret) for secret in secrets] == [True, True, True]
    assert capture.holds(MARKER_RATE)
