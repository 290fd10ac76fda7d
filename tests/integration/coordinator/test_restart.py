"""Stopping and restarting the coordinator loses no job."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil

from appliance.client import ApplianceClient
from appliance.domain.phases import Phase
from tests.integration.coordinator.harness import (
    RunningCoordinator,
    kill_workers,
    wait_until,
    worker_processes,
)


def _restart(old: RunningCoordinator, data_dir: Path) -> RunningCoordinator:
    """Stop the coordinator and start a new one on the same data dir and gRPC port."""
    port = old.coordinator.grpc_port
    old.stop()
    return RunningCoordinator(data_dir, grpc_port=port).start()


def test_restart_adopts_running_job_and_keeps_queue(tmp_path: Path, params_file: Path) -> None:
    data_dir = tmp_path / "data"
    first = RunningCoordinator(data_dir).start()
    address = first.address
    second = None
    try:
        with ApplianceClient(address) as client:
            running = client.submit(params=params_file, num_csx=4, num_steps=1_000_000)
            wait_until(lambda: running.status.phase is Phase.RUNNING, 60, "the job to run")
            queued = client.submit(params=params_file, num_csx=2, num_steps=3)
            wait_until(lambda: queued.status.pending_reason != "waiting for the scheduler", 10)
            pids = sorted(p.pid for p in worker_processes(running.id))
            assert len(pids) == 7  # chief, 4 cs2, memoryx, swarmx

        second = _restart(first, data_dir)
        with ApplianceClient(address) as client:
            running, queued = client.job(running.id), client.job(queued.id)
            assert running.status.phase is Phase.RUNNING
            assert sorted(p.pid for p in worker_processes(running.id)) == pids
            assert queued.status.phase is Phase.QUEUED
            step = running.status.progress.step
            wait_until(lambda: running.status.progress.step > step + 5, 30, "progress to go on")

            running.cancel()
            wait_until(lambda: not worker_processes(running.id), 10, "adopted replicas to stop")
            assert queued.wait(timeout=60).phase is Phase.SUCCEEDED
    finally:
        kill_workers(address)
        (second or first).stop()


def test_restart_fails_job_whose_replicas_are_gone(tmp_path: Path, params_file: Path) -> None:
    data_dir = tmp_path / "data"
    first = RunningCoordinator(data_dir).start()
    address = first.address
    second = None
    try:
        with ApplianceClient(address) as client:
            job = client.submit(params=params_file, num_csx=1, num_steps=1_000_000)
            wait_until(lambda: job.status.phase is Phase.RUNNING, 60, "the job to run")
        port = first.coordinator.grpc_port
        first.stop()
        victims = worker_processes(job.id)
        for proc in victims:
            os.kill(proc.pid, signal.SIGKILL)
        psutil.wait_procs(victims, timeout=10)

        second = RunningCoordinator(data_dir, grpc_port=port).start()
        with ApplianceClient(address) as client:
            status = client.get_job(job.id)
        assert status.phase is Phase.FAILED
        assert status.reason.startswith("replicas gone after a coordinator restart: ")
        assert "chief-0" in status.reason and "cs2-0" in status.reason
    finally:
        kill_workers(address)
        (second or first).stop()


def test_adopted_job_runs_to_succeeded(tmp_path: Path, params_file: Path) -> None:
    data_dir = tmp_path / "data"
    first = RunningCoordinator(data_dir).start()
    address = first.address
    second = None
    try:
        with ApplianceClient(address) as client:
            job = client.submit(params=params_file, num_csx=1, num_steps=150)
            wait_until(lambda: job.status.progress.step > 0, 60, "the job to make progress")
        second = _restart(first, data_dir)
        with ApplianceClient(address) as client:
            final = client.job(job.id).wait(timeout=120)
        assert final.phase is Phase.SUCCEEDED, final.reason
        assert final.progress.step == 150
        chief = next(r for r in final.replicas if r.name == "chief-0")
        assert chief.exit_code == 0  # read from the exit file the adopted chief left
        wait_until(lambda: not worker_processes(job.id), 10, "replicas to exit")
    finally:
        kill_workers(address)
        (second or first).stop()


def test_job_that_finished_while_the_coordinator_was_away_succeeds(
    tmp_path: Path, params_file: Path
) -> None:
    data_dir = tmp_path / "data"
    first = RunningCoordinator(data_dir).start()
    address = first.address
    second = None
    try:
        with ApplianceClient(address) as client:
            job = client.submit(params=params_file, num_csx=1, num_steps=5)
            wait_until(lambda: job.status.phase is Phase.RUNNING, 60, "the job to run")
        port = first.coordinator.grpc_port
        first.stop()
        # The chief cannot report its last step while no coordinator listens: it keeps trying
        # (workers exit only when told, or after the orphan timeout). Kill nothing; restart.
        second = RunningCoordinator(data_dir, grpc_port=port).start()
        with ApplianceClient(address) as client:
            final = client.job(job.id).wait(timeout=60)
        assert final.phase is Phase.SUCCEEDED, final.reason
    finally:
        kill_workers(address)
        (second or first).stop()
