"""A coordinator killed with SIGKILL in the middle of a preemption or a restart comes back to a
consistent state: the job is queued or running exactly once, no system is held twice, and no
replica of the earlier attempt is left running. `appliance serve` runs as a user runs it, and
is killed at each point: after the checkpoint request, during the teardown, after the requeue.
The points are reached deterministically: a replica the test has stopped (SIGSTOP) holds the
coordinator there."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from appliance.client import ApplianceClient, JobHandle
from appliance.domain.job import Job
from appliance.domain.phases import Phase
from tests.e2e.conftest import BIN
from tests.integration.coordinator.harness import kill_workers, wait_until, worker_processes

PARAMS = {
    "model": {"name": "fc_mnist", "hidden_sizes": [16]},
    "runconfig": {"checkpoint_steps": 200, "seed": 9},
}
ENV = {
    "APPLIANCE_PREEMPTION_GRACE_SECONDS": "300",  # the checkpoint's deadline never decides here
    "APPLIANCE_CANCEL_GRACE_SECONDS": "60",  # a stopped replica holds the teardown this long
    "APPLIANCE_RESTART_BACKOFF_SECONDS": "0",
}


class Serve:
    """`appliance serve` in its own process, killed with SIGKILL and started again on the same
    gRPC port (the replicas keep calling that address)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = 0
        self.address = ""
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [BIN / "appliance", "serve", "--data-dir", self.data_dir, "--grpc-port",
             str(self.port), "--http-port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, **ENV},
        )  # fmt: skip
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline()
        match = re.match(r"appliance (127\.0\.0\.1:(\d+)) \(gRPC\)", first)
        assert match, f"unexpected first line from appliance serve: {first!r}"
        self.address, self.port = match.group(1), int(match.group(2))

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    running = Serve(tmp_path / "data")
    running.start()
    try:
        yield running
    finally:
        for proc in worker_processes(coordinator=running.address):
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.resume()  # a replica the test stopped must not outlive it
        running.stop()
        kill_workers(running.address)


def _pid(job: JobHandle, replica: str) -> int:
    return next(r.pid for r in job.status.replicas if r.name == replica)


def _attempt_processes(job_id: str, attempt: int) -> list[psutil.Process]:
    """Live replicas of one attempt of the job (the attempt is in each one's environment)."""
    found = []
    for proc in worker_processes(job_id):
        try:
            if proc.environ().get("APPLIANCE_JOB_ATTEMPT") == str(attempt):
                found.append(proc)
        except psutil.NoSuchProcess:
            continue
    return found


def _consistent_end(client: ApplianceClient, victim_id: str, others: list[str]) -> JobHandle:
    """Every job ends SUCCEEDED; the victim after exactly one requeue; nothing of its first
    attempt runs; no node is held beyond its capacity. Returns the victim's handle."""
    for job_id in others:
        assert client.job(job_id).wait(timeout=240).phase is Phase.SUCCEEDED
    victim = client.job(victim_id)
    final = victim.wait(timeout=240)
    assert final.phase is Phase.SUCCEEDED, final.reason
    # Queued or running exactly once at a time: one ended attempt requeued, then the last.
    assert [a.ended_in for a in final.attempts] == [Phase.QUEUED, Phase.SUCCEEDED]
    assert final.restarts == 1
    assert not _attempt_processes(victim.id, 1)
    for node in client.nodes():
        assert node.used <= node.capacity, node
    return victim


def test_killed_after_the_checkpoint_request(serve: Serve) -> None:
    with ApplianceClient(serve.address, detach=True) as client:
        # Its chief is stopped right after step 50: 600 steps leave it most of its run to do
        # after the restart (every step after the requeue's checkpoint is waited for).
        victim = client.submit(params=PARAMS, num_csx=4, num_steps=600, priority="p3")
        wait_until(lambda: victim.status.progress.step >= 50, 60, "the P3 job to train")
        chief = psutil.Process(_pid(victim, "chief-0"))
        chief.suspend()  # it cannot answer the request until the next coordinator runs
        urgent = client.submit(params=PARAMS, num_csx=2, num_steps=300, priority="p1")
        wait_until(lambda: any("asked for a checkpoint" in e.reason for e in victim.events()),
                   30, "the checkpoint request")  # fmt: skip
    serve.kill()
    serve.start()
    chief.resume()
    with ApplianceClient(serve.address, detach=True) as client:
        victim = _consistent_end(client, victim.id, [urgent.id])
        requeue = victim.status.attempts[0].reason
        assert re.fullmatch(rf"preempted by {urgent.id} \(P1\); checkpointed at step \d+; "
                            "requeued at position 2", requeue), requeue  # fmt: skip


def test_killed_during_the_teardown_of_a_restart(serve: Serve) -> None:
    with ApplianceClient(serve.address, detach=True) as client:
        # Killed just after step 250 (past the checkpoint at 200): 800 leave a margin of 500.
        job = client.submit(params=PARAMS, num_csx=2, num_steps=800, max_restarts=1)
        wait_until(lambda: job.status.progress.step >= 250, 60, "a checkpoint to be written")
        held = psutil.Process(_pid(job, "memoryx-0"))
        held.suspend()  # it cannot exit on the teardown's SIGTERM: the teardown waits
        os.kill(_pid(job, "cs2-0"), signal.SIGKILL)
        others = [p for p in _attempt_processes(job.id, 1) if p.pid != held.pid]
        psutil.wait_procs(others, timeout=30)
        assert all(not p.is_running() for p in others), "the teardown did not begin"
        assert job.status.phase is Phase.RUNNING  # the requeue is not written yet
    serve.kill()
    held.resume()
    serve.start()
    with ApplianceClient(serve.address, detach=True) as client:
        job = _consistent_end(client, job.id, [])
        assert "cs2-0 exited with exit code 137" in job.status.attempts[0].reason


def test_killed_after_the_requeue(serve: Serve) -> None:
    with ApplianceClient(serve.address, detach=True) as client:
        # The victim is preempted a second or so after step 50; its steps after the resume are
        # only waited for. The P1 job must still run after the restart: it keeps its 1,500.
        victim = client.submit(params=PARAMS, num_csx=4, num_steps=600, priority="p3")
        wait_until(lambda: victim.status.progress.step >= 50, 60, "the P3 job to train")
        urgent = client.submit(params=PARAMS, num_csx=2, num_steps=1_500, priority="p1")
        wait_until(lambda: urgent.status.phase is Phase.RUNNING, 60, "the P1 job to run")
        assert victim.status.phase is Phase.QUEUED
    serve.kill()
    serve.start()
    with ApplianceClient(serve.address, detach=True) as client:
        assert client.get_job(urgent.id).phase is Phase.RUNNING  # adopted, not started twice
        _consistent_end(client, victim.id, [urgent.id])


def test_killed_after_jobs_changed_its_listings_show_the_changes(serve: Serve) -> None:
    """The summaries kept in the store (what a restart lists without rendering again) are
    served after a crash only for the jobs that did not change since they were kept."""
    with ApplianceClient(serve.address, detach=True) as client:
        for system in ("cs2-01", "cs2-02", "cs2-03", "cs2-04"):
            client.set_node_state(system, "maintenance")  # every job stays queued
        ids = [client.submit(params=PARAMS, num_csx=1, num_steps=10).id for _ in range(4)]
        client.cancel_job(ids[3])
    serve.kill()
    serve.start()  # it renders the history ahead and keeps it in the store
    wait_until(lambda: _kept(serve.data_dir) == 4, 30, "the four summaries to be kept")
    with ApplianceClient(serve.address, detach=True) as client:
        client.update_labels(ids[1], {"team": "nlp"})
        client.cancel_job(ids[2])
        assert len(client.list_jobs(all=True)) == 4  # the changes rendered, in memory only
    serve.kill()
    serve.start()
    with ApplianceClient(serve.address, detach=True) as client:

        def agree() -> bool:  # once the scheduler's first pass has said why each one waits
            full = {job_id: _shown(client.get_job(job_id)) for job_id in ids}
            return {job.id: _shown(job) for job in client.list_jobs(all=True)} == full

        wait_until(agree, 15, "listings to show what GetJob shows")
        listed = {job.id: _shown(job) for job in client.list_jobs(all=True)}
    assert listed[ids[1]][1] == {"team": "nlp"}
    assert [listed[job_id][0] for job_id in ids] == [Phase.QUEUED, Phase.QUEUED,
                                                     Phase.CANCELLED, Phase.CANCELLED]  # fmt: skip


def _kept(data_dir: Path) -> int:
    with contextlib.closing(sqlite3.connect(data_dir / "appliance.db")) as db:
        return int(db.execute("SELECT count(*) FROM job_renderings").fetchone()[0])


def _shown(job: Job) -> tuple[Phase, dict[str, str], int, str, float]:
    """What a listing must show as GetJob does."""
    return job.phase, dict(job.spec.labels), job.queue_position, job.pending_reason, job.updated_at
