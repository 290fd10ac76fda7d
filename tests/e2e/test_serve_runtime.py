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


def session_ca() -> Path:
    """The session's CA (tests/conftest.py), which every coordinator of the suite signs with."""
    return Path(os.environ["APPLIANCE_TLS_CA_DIR"]) / "ca.crt"


def first_lines(tmp_path: Path, env: dict[str, str]) -> tuple[str, str]:
    """The first line `appliance serve` prints and its hint (after the line naming the CA),
    run from the folder holding the venv."""
    proc = subprocess.Popen(
        [BIN / "appliance", "serve", "--data-dir", tmp_path / "data", "--grpc-port", "0",
         "--http-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
        cwd=BIN.parent.parent,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        first, tls, hint = (proc.stdout.readline() for _ in range(3))
        assert tls.startswith(f"TLS: clients verify with the CA {session_ca()} (SHA256:"), tls
        return first, hint
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


@pytest.mark.parametrize("activated", [False, True])
def test_the_hint_names_a_csctl_a_new_shell_finds(tmp_path: Path, activated: bool) -> None:
    """`make install` does not activate the venv: in a new shell `csctl` is not found, so the
    hint names the venv's csctl by its path and says how to make plain `csctl` work."""
    path = [p for p in os.environ["PATH"].split(os.pathsep) if Path(p) != BIN]
    env = {**os.environ, "PATH": os.pathsep.join(([str(BIN)] if activated else []) + path)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    first, hint = first_lines(tmp_path, env)
    grpc = re.match(r"appliance (127\.0\.0\.1:\d+) \(gRPC\)", first)
    assert grpc, first
    venv_bin = Path(BIN.parent.name, BIN.name)  # .venv/bin
    if activated:
        trust = f"--certificate-authority {session_ca()}"
        assert hint == f"try: csctl --server {grpc.group(1)} {trust} get jobs -a\n"
    else:
        assert hint == (
            f"try: {venv_bin / 'csctl'} --server {grpc.group(1)} "
            f"--certificate-authority {session_ca()} get jobs -a "
            f"(plain `csctl` once you run: . {venv_bin / 'activate'})\n"
        )


@pytest.mark.parametrize("in_pod", [False, True])
def test_a_wildcard_bind_prints_an_address_a_user_can_dial(tmp_path: Path, in_pod: bool) -> None:
    """Bound to 0.0.0.0 (as in the chart), `csctl --server 0.0.0.0:50051` is no advice: locally
    loopback reaches it; in a pod, the user comes in through kubectl port-forward."""
    env = {**os.environ, "APPLIANCE_HOST": "0.0.0.0"}
    env["PATH"] = os.pathsep.join([str(BIN), env["PATH"]])  # csctl found: the plain hint
    env.pop("KUBERNETES_SERVICE_HOST", None)
    if in_pod:
        env["KUBERNETES_SERVICE_HOST"] = "10.96.0.1"  # what the kubelet sets in every pod
    first, hint = first_lines(tmp_path, env)
    assert "0.0.0.0:" not in first + hint, first + hint
    grpc = re.match(r"appliance (127\.0\.0\.1:\d+) \(gRPC\), https?://127\.0\.0\.1:\d+ ", first)
    assert grpc, first
    assert "listening on every address (0.0.0.0)" in first
    if in_pod:
        assert hint.startswith("try, from your machine: kubectl port-forward svc/"), hint
        assert "csctl --server 127.0.0.1:50051 --certificate-authority ca.crt get jobs" in hint
    else:
        trust = f"--certificate-authority {session_ca()}"
        assert hint == f"try: csctl --server {grpc.group(1)} {trust} get jobs -a\n"
