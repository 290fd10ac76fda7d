"""A wsjob from submit to a terminal phase on the embedded default (gRPC, SQLite, processes)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from appliance.client import ApplianceClient
from appliance.client.errors import JobCancelled
from appliance.domain.job import EventKind, ReplicaPhase
from appliance.domain.phases import Phase
from tests.integration.coordinator.harness import RunningCoordinator, wait_until, worker_processes


@pytest.fixture
def coordinator_database(store_url: str) -> str:
    """Run every test here against SQLite and PostgreSQL."""
    return store_url


def test_two_cs2_job_reaches_succeeded_with_progress(
    client: ApplianceClient, params_file: Path
) -> None:
    job = client.submit(params=params_file, num_csx=2, num_steps=20, labels={"team": "nlp"})
    events = list(job.watch(timeout=60))
    phases = [e.to_phase for e in events if e.kind is EventKind.PHASE]
    assert phases == [
        Phase.QUEUED,
        Phase.SCHEDULED,
        Phase.INITIALIZING,
        Phase.RUNNING,
        Phase.SUCCEEDED,
    ]
    steps = [e.progress.step for e in events if e.progress is not None]
    assert steps and steps[-1] == 20 and steps == sorted(steps)

    final = job.wait(timeout=30)
    assert final.phase is Phase.SUCCEEDED
    assert final.progress.step == 20
    assert len(final.systems) == 2
    assert final.spec.labels == {"team": "nlp"}
    roles = sorted(r.role.value for r in final.replicas)
    assert roles == ["chief", "cs2", "cs2", "memoryx", "swarmx"]
    chief = next(r for r in final.replicas if r.name == "chief-0")
    assert chief.exit_code == 0


def test_job_waits_in_queue_with_a_reason_then_runs(
    client: ApplianceClient, params_file: Path
) -> None:
    big = client.submit(params=params_file, num_csx=4, num_steps=100_000)
    wait_until(lambda: big.status.phase is Phase.RUNNING, 60, "the 4-system job to run")

    queued = client.submit(params=params_file, num_csx=2, num_steps=5)
    wait_until(lambda: queued.status.pending_reason.startswith("needs 2 systems, 0 free"), 10)
    status = queued.status
    assert status.phase is Phase.QUEUED and status.queue_position == 1

    big.cancel()
    assert queued.wait(timeout=60).phase is Phase.SUCCEEDED
    assert big.status.phase is Phase.CANCELLED


def test_cancel_running_job_leaves_no_process(
    client: ApplianceClient, params_file: Path, coordinator: RunningCoordinator
) -> None:
    job = client.submit(params=params_file, num_csx=2, num_steps=100_000)
    wait_until(lambda: job.status.phase is Phase.RUNNING, 60, "the job to run")
    assert len(worker_processes(job.id)) == 5

    result = job.cancel()
    assert result.changed
    wait_until(lambda: not worker_processes(job.id), 10, "replicas to be gone")
    status = job.status
    assert status.phase is Phase.CANCELLED and status.reason == "cancelled by user"
    with pytest.raises(JobCancelled):
        job.wait(timeout=5)

    again = job.cancel()
    assert not again.changed and "already cancelled" in again.message


def test_killed_replica_fails_job_with_exit_code(
    client: ApplianceClient, params_file: Path
) -> None:
    job = client.submit(params=params_file, num_csx=2, num_steps=100_000)
    wait_until(lambda: job.status.phase is Phase.RUNNING, 60, "the job to run")
    victim = next(r for r in job.status.replicas if r.name == "cs2-1")

    killed_at = time.monotonic()
    os.kill(victim.pid, signal.SIGKILL)
    wait_until(lambda: job.status.phase is Phase.FAILED, 5, "the job to fail")
    assert time.monotonic() - killed_at < 2.0

    status = job.status
    assert "cs2-1" in status.reason and "137" in status.reason and "SIGKILL" in status.reason
    failed = next(r for r in status.replicas if r.name == "cs2-1")
    assert failed.exit_code == 137 and failed.phase is ReplicaPhase.FAILED
    wait_until(lambda: not worker_processes(job.id), 10, "the other replicas to be stopped")


def test_finished_job_returns_its_resources(client: ApplianceClient, params_file: Path) -> None:
    jobs = [client.submit(params=params_file, num_csx=4, num_steps=3) for _ in range(2)]
    for job in jobs:
        assert job.wait(timeout=60).phase is Phase.SUCCEEDED
    assert {s for j in jobs for s in j.status.systems} == {"cs2-01", "cs2-02", "cs2-03", "cs2-04"}
