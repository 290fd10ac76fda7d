"""The per-user cap of running systems (MaxTRESPerUser, #36) on a real coordinator with the
simulated backend: a user at their cap waits in the queue saying so while another user's job
runs; when one of theirs ends, the one waiting starts; `csctl get limits` shows the cap and
the use, `csctl get jobs --reason` the job waiting for it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from appliance.client import ApplianceClient
from appliance.client.handle import JobHandle
from appliance.domain.phases import Phase
from appliance.domain.reasons import ReasonCode
from appliance.domain.spec import SIM_STEP_SECONDS_LABEL
from csctl.cli import cli
from tests.integration.coordinator.harness import RunningCoordinator, user_tokens, wait_until

PARAMS = {"model": {"name": "fc_mnist", "hidden_sizes": [8]}}
FOREVER = {SIM_STEP_SECONDS_LABEL: "1"}  # with a million steps: until cancelled


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[RunningCoordinator, dict[str, str]]]:
    (tmp_path / "limits.yaml").write_text("users: {alice: {running_systems: 2}}\n")
    tokens = user_tokens(tmp_path / "tokens.yaml")
    running = RunningCoordinator(
        tmp_path / "data", backend="sim", sim_step_seconds=0.0,
        limits_file=tmp_path / "limits.yaml", auth_tokens_file=tmp_path / "tokens.yaml",
    ).start()  # fmt: skip
    try:
        yield running, tokens
    finally:
        running.stop()


def _phase(job: JobHandle) -> Phase:
    return job.status.phase


def test_a_user_at_their_cap_waits_while_others_run(
    cluster: tuple[RunningCoordinator, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    running, tokens = cluster
    monkeypatch.delenv("CSCTL_SERVER", raising=False)
    with (
        ApplianceClient(running.address, token=tokens["alice"], detach=True) as alice,
        ApplianceClient(running.address, token=tokens["bob"], detach=True) as bob,
    ):
        mine = [
            alice.submit(params=PARAMS, num_csx=1, num_steps=1_000_000, labels=FOREVER)
            for _ in range(3)
        ]
        wait_until(
            lambda: [_phase(j) for j in mine[:2]] == [Phase.RUNNING] * 2, 30, "two of alice's"
        )
        third = mine[2]
        wait_until(
            lambda: third.status.pending_reason_code == ReasonCode.USER_SYSTEMS.value,
            30,
            "the third to wait for alice's cap",
        )
        assert "alice's running jobs hold 2 of their 2 systems" in third.status.pending_reason
        theirs = bob.submit(params=PARAMS, num_csx=1, num_steps=1_000_000, labels=FOREVER)
        wait_until(lambda: _phase(theirs) is Phase.RUNNING, 30, "bob's job, beside alice's")
        assert _phase(third) is Phase.QUEUED

        def csctl(*args: str) -> str:
            server = ["--server", running.address, "--token", tokens["alice"]]
            result = CliRunner().invoke(cli, [*server, *args])
            assert result.exit_code == 0, result.output
            return result.stdout

        waiting = csctl("get", "jobs", "--reason", ReasonCode.USER_SYSTEMS.value)
        assert third.id in waiting and mine[0].id not in waiting
        limits = csctl("get", "limits").splitlines()
        assert ["running", "systems", "2", "2"] in [line.split() for line in limits]

        mine[0].cancel()
        wait_until(lambda: _phase(third) is Phase.RUNNING, 30, "the third, once one ended")
        assert _phase(mine[1]) is Phase.RUNNING
        for job in (*mine[1:], theirs):
            job.cancel()
