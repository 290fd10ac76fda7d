"""`appliance serve` as a command: what the process sets up for itself after start."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

BIN = Path(sys.executable).parent


def test_serve_freezes_its_start_up_heap(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [BIN / "appliance", "serve", "--data-dir", tmp_path / "data", "--grpc-port", "0",
         "--http-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        found = re.search(r"(http://\S+) \(HTTP\)", first)
        assert found, f"unexpected first line from appliance serve: {first!r}"
        scraped = httpx.get(f"{found.group(1)}/metrics", timeout=30).text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    frozen = {
        sample.name: sample.value
        for family in text_string_to_metric_families(scraped)
        for sample in family.samples
    }["appliance_gc_frozen_objects"]
    # Full collections would otherwise scan every module and object built at start (~126k)
    # on each pass: 60-110 ms stalls of the event loop under load.
    assert frozen > 50_000
