"""Two coordinators on one real PostgreSQL database (high availability, #17): `appliance serve`
twice, as a user runs it, with the local backend, one data dir, and both gRPC addresses given
to the replicas (bench/failover.py starts them). The leader is killed with SIGKILL, or paused
with SIGSTOP past its lease; the standby takes over, adopts what runs, and schedules again;
nothing is lost, run twice or left half-started, and a paused leader that wakes writes
nothing and steps down. A second coordinator on one SQLite file is refused."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.client import ApplianceClient, JobHandle
from appliance.domain.errors import Unavailable
from appliance.domain.phases import Phase
from bench.failover import GOAL_S, Coordinators, kill_9
from tests.e2e.conftest import BIN
from tests.integration.coordinator.harness import wait_until, worker_processes
from tests.postgres import PostgresServer

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
PARAMS = {"model": {"name": "fc_mnist", "hidden_sizes": [16]}}


@pytest.fixture
def pair(postgres: PostgresServer, tmp_path: Path) -> Iterator[Coordinators]:
    """Coordinator 0 leads, coordinator 1 stands by."""
    with postgres.fresh_database() as url:
        coordinators = Coordinators(tmp_path / "data", url)
        try:
            coordinators.start(0)
            assert coordinators.wait_leader() == 0
            coordinators.start(1)
            yield coordinators
        finally:
            for proc in coordinators.procs:  # one the test paused must not outlive it
                if proc is not None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.proc.send_signal(signal.SIGCONT)
            coordinators.stop()


def _submit(client: ApplianceClient, num_steps: int, timeout: float = 60) -> JobHandle:
    """Submit a 1-CS-2 job, retrying while the coordinator stands by."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return client.submit(params=PARAMS, num_csx=1, num_steps=num_steps)
        except Unavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _running(job: JobHandle) -> dict[str, int]:
    wait_until(lambda: job.status.phase is Phase.RUNNING, 60, f"{job.id} RUNNING")
    return {r.name: r.pid for r in job.status.replicas}


def _processes(job: JobHandle) -> dict[str, int]:
    """The job's live replica processes by replica name (a name twice would be a double)."""
    found: dict[str, int] = {}
    for proc in worker_processes(job.id):
        # The command line worker_processes read: read again, an exiting process's is empty.
        cmdline = proc.info["cmdline"]
        name = cmdline[cmdline.index("--replica") + 1]
        assert name not in found, f"{job.id}/{name} runs twice"
        found[name] = proc.pid
    return found


def _http(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _scheduled_at(job: JobHandle) -> float:
    wait_until(lambda: job.status.phase is not Phase.QUEUED, 60, f"{job.id} scheduled")
    return next(e.time for e in job.events() if e.to_phase is Phase.SCHEDULED)


def test_the_standby_answers_in_one_line(pair: Coordinators) -> None:
    http = pair.ports[1][1]
    status, body = _http(f"http://127.0.0.1:{http}/readyz")
    standby = (
        f"this coordinator is a standby; the leader is {_leader_name(pair)} (epoch 1): retry "
        "through the appliance's Service address, or at the leader"
    )
    assert (status, body["reason"]) == (503, standby)
    status, body = _http(f"http://127.0.0.1:{http}/api/v1/jobs")
    assert (status, body) == (503, {"error": {"code": "unavailable", "message": standby,
                                              "field": None}})  # fmt: skip
    assert _http(f"http://127.0.0.1:{http}/healthz")[0] == 200
    with ApplianceClient(pair.address(1), detach=True, insecure=True) as client:
        with pytest.raises(Unavailable) as refused:
            client.submit(params=PARAMS, num_csx=1, num_steps=10)
        assert refused.value.message == standby
        assert client.version()  # GetVersion is answered by all
    with ApplianceClient(pair.address(0), detach=True, insecure=True) as client:
        assert client.list_jobs() == []  # nothing was half-submitted to the standby


def _leader_name(pair: Coordinators) -> str:
    proc = pair.procs[0]
    assert proc is not None
    import socket

    return f"{socket.gethostname()}-{proc.pid} at {pair.address(0)}"


def test_kill_9_of_the_leader_the_standby_adopts_and_schedules_again(
    pair: Coordinators,
) -> None:
    with ApplianceClient(pair.address(0), detach=True, insecure=True) as client:
        adopted = _submit(client, 1_000_000)
        pids = _running(adopted)
        step = adopted.status.progress.step
    killed = kill_9(pair, 0)
    with ApplianceClient(pair.address(1), detach=True, insecure=True) as client:
        fresh = _submit(client, 40)
        took = _scheduled_at(fresh) - killed
        assert took <= GOAL_S, f"scheduling again took {took:.1f} s after the kill"
        assert fresh.wait(timeout=120).phase is Phase.SUCCEEDED
        kept = client.job(adopted.id)
        status = kept.status
        assert (status.phase, status.attempt, status.restarts) == (Phase.RUNNING, 1, 0)
        assert _processes(kept) == pids  # adopted, not started again
        # Its replicas found the new leader: their progress reports arrive there.
        wait_until(lambda: kept.status.progress.step > step + 10, 60, "progress reports")
        assert kept.cancel().job.phase is Phase.CANCELLED
        wait_until(lambda: not _processes(kept), 30, "the adopted replicas to be stopped")
        phases = [e.to_phase for e in kept.events() if e.to_phase is not None]
        assert phases == [Phase.QUEUED, Phase.SCHEDULED, Phase.INITIALIZING, Phase.RUNNING,
                          Phase.CANCELLED]  # fmt: skip


def test_a_leader_paused_past_its_lease_writes_nothing_and_steps_down(
    pair: Coordinators,
) -> None:
    old = pair.procs[0]
    assert old is not None
    with ApplianceClient(pair.address(0), detach=True, insecure=True) as client:
        first = _submit(client, 1_000_000)
        _running(first)
    old.proc.send_signal(signal.SIGSTOP)
    wait_until(lambda: pair.ready(1), 30, "the standby to take over")
    with ApplianceClient(pair.address(1), detach=True, insecure=True) as client:
        # The new leader cancels the first job (the old one still counts it as its own) and
        # starts a second: what a woken old leader would tear down or start again.
        assert client.job(first.id).cancel().job.phase is Phase.CANCELLED
        second = _submit(client, 1_000_000)
        pids = _running(second)
        jobs = (client.job(first.id), second)
        events = {job.id: job.events() for job in jobs}
        old.proc.send_signal(signal.SIGCONT)
        # It stops acting at once and exits, saying why.
        assert old.proc.wait(timeout=30) == 1
        assert "lost the leadership lease" in old.log_path.read_text()
        assert pair.ready(1) and not pair.ready(0)
        # Nothing of it was written, nothing started twice or stopped.
        assert {job.id: job.events() for job in jobs} == events
        assert _processes(client.job(second.id)) == pids
        status = client.job(second.id).status
        assert (status.phase, status.attempt) == (Phase.RUNNING, 1)
        client.job(second.id).cancel()


def test_a_second_coordinator_on_one_sqlite_file_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    serve = [str(BIN / "appliance"), "serve", "--data-dir", str(data), "--grpc-port", "0",
             "--http-port", "0"]  # fmt: skip
    first = subprocess.Popen(serve, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert first.stdout is not None and first.stdout.readline().startswith("appliance ")
        second = subprocess.run(serve, capture_output=True, text=True, timeout=60)
        assert second.returncode == 1
        assert second.stderr.strip().splitlines()[-1] == (
            f"Error: another coordinator (pid {first.pid}) uses the SQLite store "
            f"{(data / 'appliance.db').resolve()}; SQLite allows one coordinator: stop that "
            "one, or use PostgreSQL (APPLIANCE_DATABASE_URL) to run two"
        )
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0
