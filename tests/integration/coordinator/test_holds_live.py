"""Holds and suspend on a live coordinator with real local replicas, driven by csctl as a user
runs it (#37): a held job is stepped over while a job behind it runs, and runs once released;
a suspended job checkpoints, gives its systems back, waits held, and once resumed ends exactly
as an uninterrupted run of the same spec (weights, optimizer state and every logged metric)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.client import ApplianceClient
from appliance.domain.inventory import NodeState
from appliance.domain.phases import Phase
from tests.integration.coordinator.harness import RunningCoordinator, serving, wait_until
from tests.integration.coordinator.same_run import assert_same_run, csctl, run_csctl
from tests.model_specs import FC, SGD

SYSTEMS = ["cs2-01", "cs2-02", "cs2-03", "cs2-04"]
# fc_mnist runs over 100 steps/s here: a run's timeline had the suspension (through csctl, a
# process of its own) checkpoint at step 200, so 800 leave it 4 times that before the end.
STEPS = 800


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[RunningCoordinator]:
    with serving(tmp_path / "data", restart_backoff_seconds=0.0) as running:
        yield running


def _params() -> dict[str, Any]:
    params = copy.deepcopy(FC)
    params["optimizer"] = SGD
    params["runconfig"] = {**params["runconfig"], "checkpoint_steps": 50, "log_steps": 5}
    return params


def _refused(address: str, *args: str) -> str:
    """csctl's one line of error for a refused command (exit 1)."""
    done = run_csctl(address, *args)
    assert done.returncode == 1, done.stdout
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    return done.stderr


def test_held_jobs_are_stepped_over_and_run_once_released(
    coordinator: RunningCoordinator,
) -> None:
    address = coordinator.address
    store = coordinator.coordinator.ctx.store
    store.set_node_state(SYSTEMS, NodeState.MAINTENANCE)  # nothing starts while we hold
    with ApplianceClient(address, detach=True) as client:
        held = client.submit(params=_params(), num_csx=1, num_steps=5, hold=True)
        behind = client.submit(params=_params(), num_csx=1, num_steps=5)
        last = client.submit(params=_params(), num_csx=1, num_steps=5)
        assert csctl(address, "hold", "job", last.id) == f"job {last.id} held\n"
        store.set_node_state(SYSTEMS[:1], NodeState.OK)  # one job runs at a time
        assert behind.wait(timeout=120).phase is Phase.SUCCEEDED
        status = held.status
        assert status.phase is Phase.QUEUED and status.queue_position == 1
        assert status.pending_reason_code == "HeldUser"
        assert last.status.phase is Phase.QUEUED
        listing = csctl(address, "get", "jobs", "-o", "wide")
        assert "HeldUser" in next(line for line in listing.splitlines() if held.id in line)
        assert "HELD: held by" in csctl(address, "get", "job", held.id)

        released = csctl(address, "release", "job", held.id, last.id)
        assert released == f"job {held.id} released\njob {last.id} released\n"
        assert held.wait(timeout=120).phase is Phase.SUCCEEDED
        assert last.wait(timeout=120).phase is Phase.SUCCEEDED
        said = _refused(address, "hold", "job", held.id)
        assert f"job {held.id} is SUCCEEDED; only a queued job can be held" in said
        assert "not found" in _refused(address, "release", "job", "wsjob-nosuchjob00000")
        assert "not a job id" in _refused(address, "resume", "job", "nonsense")


def test_a_suspended_job_resumes_exactly_from_its_checkpoint(
    coordinator: RunningCoordinator,
) -> None:
    address = coordinator.address
    params = _params()
    with ApplianceClient(address, detach=True) as client:
        reference = client.submit(params=params, num_csx=1, num_steps=STEPS)
        uninterrupted = reference.wait(timeout=120)
        assert uninterrupted.phase is Phase.SUCCEEDED, uninterrupted.reason

        job = client.submit(params=params, num_csx=1, num_steps=STEPS)
        wait_until(lambda: job.status.progress.step >= 70, 120, "a checkpoint to be written")
        said = csctl(address, "suspend", "job", job.id)
        assert said.startswith(f"job {job.id} suspended: checkpointing")
        wait_until(lambda: job.status.phase is Phase.QUEUED, 60, "the suspension's requeue")
        suspended = job.status
        assert suspended.hold is not None and suspended.hold.suspended
        assert suspended.systems == () and suspended.pending_reason_code == "Suspended"
        assert suspended.attempts[0].ended_in is Phase.QUEUED
        checkpoint = suspended.progress.checkpoint_step
        assert 50 <= checkpoint < STEPS
        free = client.nodes()
        assert all(not node.jobs for node in free), free  # its systems went back

        assert csctl(address, "resume", "job", job.id) == f"job {job.id} resumed\n"
        final = job.wait(timeout=150)

    assert final.phase is Phase.SUCCEEDED, final.reason
    first, second = final.attempts
    assert second.resumed_from == checkpoint, first.reason
    assert_same_run(Path(final.spec.model_dir), Path(uninterrupted.spec.model_dir), STEPS)
