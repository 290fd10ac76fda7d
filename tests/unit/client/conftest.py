"""Fixtures for the client tests: a fake ClusterService on a real gRPC server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_cluster_service import FakeCluster, serve_fake_cluster

from appliance.client import ApplianceClient, WatchRetry


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = serve_fake_cluster()
    yield fake
    fake.stop()


@pytest.fixture
def client(cluster: FakeCluster) -> Iterator[ApplianceClient]:
    with ApplianceClient(
        cluster.address,
        timeout=5.0,
        watch_retry=WatchRetry(give_up_after=2.0, initial_backoff=0.0),
    ) as appliance_client:
        yield appliance_client


@pytest.fixture
def params_file(tmp_path: Path) -> Path:
    path = tmp_path / "params_fc_mnist.yaml"
    path.write_text(
        "model:\n  name: fc_mnist\n  hidden_sizes: [64]\ntrain_input:\n  batch_size: 32\n"
    )
    return path
