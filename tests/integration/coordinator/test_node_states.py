"""An admin takes systems out of service under running jobs, with csctl against a real
coordinator running real replicas: a system set to error requeues the job on it from its
checkpoint (or fails it when its policy has no restart left), a drained system lets its job
finish, and no new job lands on either until it is set ok (the issue's third check)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.client import ApplianceClient
from appliance.domain.phases import Phase
from tests.integration.coordinator.harness import RunningCoordinator, serving, wait_until
from tests.integration.coordinator.same_run import csctl

PARAMS = {
    "model": {"name": "fc_mnist", "hidden_sizes": [16]},
    "runconfig": {"checkpoint_steps": 40, "seed": 3},
}


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[RunningCoordinator]:
    with serving(tmp_path / "data", restart_backoff_seconds=0.0) as running:
        yield running


def test_a_system_in_error_requeues_its_job_and_takes_no_new_one_until_ok(
    coordinator: RunningCoordinator,
) -> None:
    address = coordinator.address
    with ApplianceClient(address, detach=True) as client:
        job = client.submit(params=PARAMS, num_csx=2, num_steps=800, max_restarts=1)
        wait_until(lambda: job.status.progress.step >= 100, 60, "a checkpoint to be written")
        assert job.status.systems == ("cs2-01", "cs2-02")
        said = csctl(address, "system", "set-state", "cs2-02", "error", "--reason", "fan")
        assert said.strip() == (f"system cs2-02 is in error; {job.id} is being requeued")

        final = job.wait(timeout=120)
        assert final.phase is Phase.SUCCEEDED, final.reason
        first, second = final.attempts
        assert first.reason.startswith(
            "system cs2-02 went to error: fan; restarting from its newest checkpoint (step "
        ), first.reason
        assert first.ended_in is Phase.QUEUED and second.resumed_from > 0
        assert "cs2-02" not in second.systems

        # Nothing new lands on cs2-02 while it is in error, even with every system wanted.
        wide = client.submit(params=PARAMS, num_csx=4, num_steps=10)
        wait_until(lambda: "needs 4 systems, 3 free" in wide.status.pending_reason, 30,
                   "the 4-system job to wait for cs2-02")  # fmt: skip
        table = csctl(address, "get", "systems")
        # JOB empty, RESERVATION "-", REASON fan
        assert re.search(r"^cs2-02\s+error\s+\S+ ago\s+-\s+fan$", table, re.MULTILINE), table
        events = csctl(address, "system", "events", "cs2-02")
        assert re.search(r"error\s+anonymous\s+fan", events), events
        csctl(address, "system", "set-state", "cs2-02", "ok")
        assert wide.wait(timeout=120).phase is Phase.SUCCEEDED


def test_without_a_restart_left_the_job_fails_naming_the_system(
    coordinator: RunningCoordinator,
) -> None:
    with ApplianceClient(coordinator.address, detach=True) as client:
        job = client.submit(params=PARAMS, num_csx=1, num_steps=100_000)
        wait_until(lambda: job.status.phase is Phase.RUNNING, 60, "the job to run")
        said = csctl(coordinator.address, "node", "set-state", "memx-01", "maintenance",
                     "--reason", "DIMM swap")  # fmt: skip
        reason = "MemoryX node memx-01 went to maintenance: DIMM swap"
        assert said.strip() == f"memoryx memx-01 is in maintenance; {job.id} FAILED ({reason})"
        assert (job.status.phase, job.status.reason) == (Phase.FAILED, reason)


def test_a_drained_system_lets_its_job_finish_and_takes_no_new_one(
    coordinator: RunningCoordinator,
) -> None:
    address = coordinator.address
    with ApplianceClient(address, detach=True) as client:
        # Long enough to be still running when csctl drains on a busy machine.
        job = client.submit(params=PARAMS, num_csx=1, num_steps=2000)
        wait_until(lambda: job.status.phase is Phase.RUNNING, 60, "the job to run")
        (system,) = job.status.systems
        said = csctl(address, "system", "drain", system, "--reason", "window")
        assert said.strip() == (
            f"system {system} is draining: no new job lands on it; {job.id} runs on to the end"
        )
        assert job.wait(timeout=120).phase is Phase.SUCCEEDED
        assert job.status.attempt == 1
        later = client.submit(params=PARAMS, num_csx=1, num_steps=10)
        assert later.wait(timeout=120).phase is Phase.SUCCEEDED
        assert system not in later.status.systems
        nodes = csctl(address, "get", "nodegroups")
        assert re.search(r"^system\s+4\s+3\s+0\s+0\s+1\s", nodes, re.MULTILINE), nodes
