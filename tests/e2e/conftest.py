"""`appliance serve` run as the command a user types, on free ports."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.integration.coordinator.harness import kill_workers

BIN = Path(sys.executable).parent


class Served(NamedTuple):
    address: str  # gRPC host:port
    http_url: str


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[Served]:
    """`appliance serve` with its data in tmp_path; stopped with SIGTERM, which must exit 0."""
    proc = subprocess.Popen(
        [BIN / "appliance", "serve", "--data-dir", tmp_path / "data", "--grpc-port", "0",
         "--http-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    first = proc.stdout.readline()
    match = re.match(r"appliance (127\.0\.0\.1:\d+) \(gRPC\), (https?://\S+) \(HTTP\)", first)
    assert match, f"unexpected first line from appliance serve: {first!r}"
    served = Served(match.group(1), match.group(2))
    try:
        yield served
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        kill_workers(served.address)
