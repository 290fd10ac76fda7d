"""A job allowed a restart survives a CS-2 replica killed mid-run: the whole gang is torn down,
the job goes back to the queue, and its next attempt resumes from the newest checkpoint and
ends with exactly the weights, optimizer state and losses of a run nobody interrupted."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from appliance.client import ApplianceClient
from appliance.domain.job import EventKind
from appliance.domain.phases import Phase
from tests.integration.coordinator.harness import RunningCoordinator, serving, wait_until
from tests.integration.coordinator.same_run import assert_same_run, csctl

STEPS = 600
PARAMS = {
    "model": {"name": "fc_mnist", "hidden_sizes": [32]},
    "optimizer": {"optimizer_type": "sgd", "learning_rate": 0.05, "momentum": 0.9},
    "runconfig": {"checkpoint_steps": 50, "log_steps": 10, "seed": 11},
}


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[RunningCoordinator]:
    with serving(tmp_path / "data", restart_backoff_seconds=0.0) as running:
        yield running


def test_a_killed_cs2_restarts_the_job_from_its_checkpoint_with_the_same_result(
    coordinator: RunningCoordinator,
) -> None:
    with ApplianceClient(coordinator.address, detach=True) as client:
        reference = client.submit(params=PARAMS, num_csx=1, num_steps=STEPS, max_restarts=0)
        uninterrupted = reference.wait(timeout=120)
        assert uninterrupted.phase is Phase.SUCCEEDED
        job = client.submit(params=PARAMS, num_csx=1, num_steps=STEPS, max_restarts=1)
        wait_until(lambda: job.status.progress.step >= 120, 60, "a checkpoint to be written")
        victim = next(r for r in job.status.replicas if r.name == "cs2-0")
        os.kill(victim.pid, signal.SIGKILL)

        final = job.wait(timeout=120)
        events = job.events()

    assert final.phase is Phase.SUCCEEDED, final.reason
    assert (final.attempt, final.restarts) == (2, 1)
    first, second = final.attempts  # what GetJob shows of each attempt, ended
    assert (first.number, first.ended_in, first.systems) == (1, Phase.QUEUED, ("cs2-01",))
    assert (second.number, second.ended_in) == (2, Phase.SUCCEEDED)
    assert "cs2-0 exited with exit code 137" in first.reason and first.started_at > 0
    phases = [e.to_phase for e in events if e.kind is EventKind.PHASE]
    assert phases == [
        Phase.QUEUED, Phase.SCHEDULED, Phase.INITIALIZING, Phase.RUNNING,
        Phase.QUEUED, Phase.SCHEDULED, Phase.INITIALIZING, Phase.RUNNING, Phase.SUCCEEDED,
    ]  # fmt: skip
    requeued = events[4]
    assert "replica cs2-0 exited with exit code 137" in requeued.reason
    resumed = re.search(r"restarting from step (\d+) \(restart 1 of 1\)", requeued.reason)
    assert resumed, requeued.reason
    assert first.resumed_from == 0 and second.resumed_from == int(resumed[1]) > 0

    mine, theirs = Path(final.spec.model_dir), Path(uninterrupted.spec.model_dir)
    log = (coordinator.settings.data_dir / "jobs" / job.id / "logs" / "chief-0.log").read_text()
    assert "attempt 2 resumes from" in log  # not from step 0
    # Exactly the uninterrupted run: weights, optimizer state, and every logged loss.
    assert_same_run(mine, theirs, STEPS)


def test_without_restarts_left_a_killed_replica_fails_the_job_as_before(
    coordinator: RunningCoordinator,
) -> None:
    with ApplianceClient(coordinator.address, detach=True) as client:
        job = client.submit(params=PARAMS, num_csx=1, num_steps=100_000)
        wait_until(lambda: job.status.phase is Phase.RUNNING, 60, "the job to run")
        victim = next(r for r in job.status.replicas if r.name == "cs2-0")
        os.kill(victim.pid, signal.SIGKILL)
        wait_until(lambda: job.status.phase.terminal, 30, "the job to end")
        status = job.status
    assert status.phase is Phase.FAILED and status.attempt == 1
    assert "cs2-0 exited with exit code 137" in status.reason


def test_restarts_and_attempts_show_in_csctl_and_rest(coordinator: RunningCoordinator) -> None:
    with ApplianceClient(coordinator.address, detach=True) as client:
        job = client.submit(params=PARAMS, num_csx=1, num_steps=100_000, max_restarts=2)
        wait_until(lambda: job.status.progress.step >= 60, 60, "a checkpoint to be written")
        os.kill(next(r.pid for r in job.status.replicas if r.name == "cs2-0"), signal.SIGKILL)
        wait_until(lambda: job.status.attempt == 2 and job.status.phase is Phase.RUNNING, 60,
                   "the second attempt to run")  # fmt: skip

        header, row = csctl(coordinator.address, "get", "jobs", "-o", "wide").splitlines()[:2]
        column = header.index("RESTARTS")
        assert row[column:].split()[0] == "1"
        detail = csctl(coordinator.address, "get", "job", job.id, "-o", "table")
        assert "ATTEMPT: 2 (restarts allowed: 2)" in detail
        first = r"^1\s+cs2-01\s+0\s+\S+\s+\S+ ago\s+QUEUED\s+replica cs2-0 exited"
        assert re.search(first, detail, re.MULTILINE), detail
        rest = httpx.get(
            f"https://127.0.0.1:{coordinator.coordinator.http_port}/api/v1/jobs/{job.id}",
            timeout=10,
        ).json()
        assert (rest["attempt"], rest["restarts"], rest["spec"]["max_restarts"]) == (2, 1, 2)
        assert [a["ended_in"] for a in rest["attempts"]] == ["QUEUED"]
        job.cancel()
