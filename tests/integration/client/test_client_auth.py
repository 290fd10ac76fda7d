"""The client, csctl and the launcher carry a bearer token (flag, environment, config file)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.client import ApplianceClient
from appliance.domain.errors import PermissionDenied, Unauthenticated
from appliance.domain.inventory import NodeState
from appliance.server.auth import create_token
from tests.integration.coordinator.harness import RunningCoordinator

BIN = Path(sys.executable).parent
PARAMS = {"model": {"name": "fc_mnist", "hidden_sizes": [8]}}
SYSTEMS = ["cs2-01", "cs2-02", "cs2-03", "cs2-04"]


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[RunningCoordinator, dict[str, str]]]:
    tokens_file = tmp_path / "tokens.yaml"
    tokens = {
        "alice": create_token(tokens_file, "alice", ["nlp"], admin=False),
        "bob": create_token(tokens_file, "bob", ["cv"], admin=False),
    }
    running = RunningCoordinator(tmp_path / "data", auth_tokens_file=tokens_file).start()
    running.coordinator.ctx.store.set_node_state(SYSTEMS, NodeState.MAINTENANCE)
    try:
        yield running, tokens
    finally:
        running.stop()


def test_client_sends_its_token(secured: tuple[RunningCoordinator, dict[str, str]]) -> None:
    running, tokens = secured
    with (
        ApplianceClient(running.address, detach=True) as anonymous,
        pytest.raises(Unauthenticated),
    ):
        anonymous.list_jobs()
    with ApplianceClient(running.address, token=tokens["alice"], detach=True) as alice:
        job = alice.submit(params=PARAMS, num_csx=1, num_steps=2)
        assert job.status.user == "alice"
        assert [j.id for j in alice.list_jobs()] == [job.id]
        streamed = alice.list_jobs(all=True)  # a server stream carries the token too
        assert [j.id for j in streamed] == [job.id]
        # "mine" is the token's user, not this process's (which submitted nothing here)
        assert [j.id for j in alice.list_jobs(mine=True)] == [job.id]
        assert [j.id for j in alice.list_jobs(mine=True, limit=10)] == [job.id]
    with ApplianceClient(running.address, token=tokens["bob"], detach=True) as bob:
        assert bob.list_jobs(mine=True) == []
        with pytest.raises(PermissionDenied):
            bob.cancel_job(job.id)


def test_csctl_token_from_flag_environment_and_config(
    secured: tuple[RunningCoordinator, dict[str, str]], tmp_path: Path
) -> None:
    running, tokens = secured
    config = tmp_path / "csctl.yaml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CSCTL_")}
    env["CSCTL_CONFIG"] = str(config)
    env["CSCTL_CA"] = os.environ["CSCTL_CA"]  # the session's (tests/conftest.py)
    config.write_text(f"server: {running.address}\n")

    def csctl(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [BIN / "csctl", *args], capture_output=True, text=True, timeout=60,
            env=env | extra,
        )  # fmt: skip

    denied = csctl("get", "jobs")
    assert denied.returncode == 1 and "authentication is required" in denied.stderr
    assert csctl("--token", tokens["alice"], "get", "jobs").returncode == 0
    assert csctl("get", "jobs", CSCTL_TOKEN=tokens["alice"]).returncode == 0
    config.write_text(f"server: {running.address}\ntoken: {tokens['alice']}\n")
    assert csctl("get", "jobs").returncode == 0
    with ApplianceClient(running.address, token=tokens["alice"], detach=True) as alice:
        job = alice.submit(params=PARAMS, num_csx=1, num_steps=2)
    mine = csctl("get", "jobs", "-m", "-o", "json")  # alice's, whatever the OS user is
    assert mine.returncode == 0 and job.id in mine.stdout, mine.stderr
    assert job.id not in csctl("get", "jobs", "-m", CSCTL_TOKEN=tokens["bob"]).stdout


def test_client_and_launcher_take_the_token_like_csctl(
    secured: tuple[RunningCoordinator, dict[str, str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No token= argument: $CSCTL_TOKEN, else `token:` in csctl's config file."""
    running, tokens = secured
    config = tmp_path / "csctl.yaml"
    config.write_text(f"token: {tokens['bob']}\n")
    monkeypatch.setenv("CSCTL_CONFIG", str(config))
    monkeypatch.setenv("CSCTL_TOKEN", tokens["alice"])
    with ApplianceClient(running.address, detach=True) as client:
        assert client.submit(params=PARAMS, num_csx=1, num_steps=2).status.user == "alice"
    monkeypatch.delenv("CSCTL_TOKEN")
    with ApplianceClient(running.address, detach=True) as client:
        assert client.submit(params=PARAMS, num_csx=1, num_steps=2).status.user == "bob"

    params = tmp_path / "params.yaml"
    params.write_text("model: {name: fc_mnist, hidden_sizes: [8]}\n")
    launched = subprocess.run(
        [sys.executable, "-m", "appliance.run", "--params", params, "--num_csx", "1",
         "--num_steps", "2", "--server", running.address, "--detach"],
        capture_output=True, text=True, timeout=60, env={**os.environ},
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    with ApplianceClient(running.address, detach=True) as client:
        assert sorted(j.user for j in client.list_jobs()) == ["alice", "bob", "bob"]
