"""`appliance serve` as a command: what the process sets up for itself after start."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import Served


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
