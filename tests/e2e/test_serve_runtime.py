"""`appliance serve` as a command: what the process sets up for itself after start."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import BIN, Served


def test_serve_freezes_its_start_up_heap(serving: Served) -> None:
    scraped = httpx.get(f"{serving.http_url}/metrics", timeout=30).text
    frozen = {
        sample.name: sample.value
        for family in text_string_to_metric_families(scraped)
        for sample in family.samples
    }["appliance_gc_frozen_objects"]
    # Full collections would otherwise scan every module and object built at start (~126k)
    # on each pass: 60-110 ms stalls of the event loop under load.
    assert frozen > 50_000


@pytest.mark.parametrize("in_pod", [False, True])
def test_a_wildcard_bind_prints_an_address_a_user_can_dial(tmp_path: Path, in_pod: bool) -> None:
    """Bound to 0.0.0.0 (as in the chart), `csctl --server 0.0.0.0:50051` is no advice: locally
    loopback reaches it; in a pod, the user comes in through kubectl port-forward."""
    env = {**os.environ, "APPLIANCE_HOST": "0.0.0.0"}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    if in_pod:
        env["KUBERNETES_SERVICE_HOST"] = "10.96.0.1"  # what the kubelet sets in every pod
    proc = subprocess.Popen(
        [BIN / "appliance", "serve", "--data-dir", tmp_path / "data", "--grpc-port", "0",
         "--http-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        first, hint = proc.stdout.readline(), proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    assert "0.0.0.0:" not in first + hint, first + hint
    grpc = re.match(r"appliance (127\.0\.0\.1:\d+) \(gRPC\), http://127\.0\.0\.1:\d+ ", first)
    assert grpc, first
    assert "listening on every address (0.0.0.0)" in first
    if in_pod:
        assert hint.startswith("try, from your machine: kubectl port-forward svc/"), hint
        assert "csctl --server 127.0.0.1:50051 get jobs -a" in hint
    else:
        assert hint == f"try: csctl --server {grpc.group(1)} get jobs -a\n"
