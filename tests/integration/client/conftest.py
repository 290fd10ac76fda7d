"""A real coordinator (real worker processes) for the client, csctl and launcher tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from appliance.client import ApplianceClient
from appliance.domain.inventory import NodeState
from csctl.cli import cli
from tests.integration.coordinator.harness import RunningCoordinator, serving

PARAMS = Path(__file__).resolve().parents[3] / "examples" / "params_fc_mnist.yaml"
SYSTEMS = ["cs2-01", "cs2-02", "cs2-03", "cs2-04"]


@pytest.fixture
def params_file() -> Path:
    return PARAMS


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[RunningCoordinator]:
    """A coordinator on free ports; at the end every replica process must be gone."""
    with serving(tmp_path / "data") as running:
        yield running


@pytest.fixture
def observer(coordinator: RunningCoordinator) -> Iterator[ApplianceClient]:
    """A client that only looks (its submits are detached)."""
    with ApplianceClient(coordinator.address, detach=True) as client:
        yield client


def hold_queue(coordinator: RunningCoordinator) -> None:
    """Every CS-2 system in maintenance: submitted jobs stay QUEUED."""
    coordinator.coordinator.ctx.store.set_node_state(SYSTEMS, NodeState.MAINTENANCE)


class Csctl:
    """csctl, in-process, against the coordinator (`--server`)."""

    def __init__(self, address: str) -> None:
        self.address = address

    def __call__(self, *args: str) -> Result:
        return CliRunner().invoke(cli, ["--server", self.address, *args])


@pytest.fixture
def csctl(coordinator: RunningCoordinator, monkeypatch: pytest.MonkeyPatch) -> Csctl:
    monkeypatch.delenv("CSCTL_SERVER", raising=False)
    return Csctl(coordinator.address)
