"""Fixtures for the csctl tests: the client tests' fake ClusterService and an isolated CLI."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from csctl_runner import Csctl

# Share the fake ClusterService with the client tests (test directories are not packages).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client"))
from fake_cluster_service import FakeCluster, serve_fake_cluster


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = serve_fake_cluster()
    yield fake
    fake.stop()


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty csctl config file; the user's own config and $CSCTL_SERVER are kept out."""
    path = tmp_path / "csctl.yaml"
    path.write_text("")
    monkeypatch.setenv("CSCTL_CONFIG", str(path))
    monkeypatch.delenv("CSCTL_SERVER", raising=False)
    return path


@pytest.fixture
def csctl(cluster: FakeCluster, config_file: Path) -> Csctl:
    return Csctl(cluster.address)


@pytest.fixture
def dead_csctl(dead_address: str, config_file: Path) -> Csctl:
    return Csctl(dead_address)
