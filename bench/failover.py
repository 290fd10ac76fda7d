"""Failover (#17): kill -9 of the leading coordinator -> a new job SCHEDULED, goal <= 15 s.

Two `appliance serve` processes share one PostgreSQL database (a throwaway server started with
tests/postgres.py, or --database-url) and one data dir, with the local backend; each is given
both gRPC addresses for its replicas (APPLIANCE_COORDINATOR_ADDRESS), as two local coordinators
must be. Each run waits for a leader (the one whose /readyz answers 200), starts a 1-CS-2 job
on it and waits until it runs (replicas for the standby to adopt), kills the leader (t0: the
pluggable step, `KillLeader`), submits a 1-CS-2 job to the survivor (refused while it stands
by), and takes the time of that job's SCHEDULED event (t1, the coordinator's clock, the same
host). It checks the first job was adopted (still RUNNING, attempt 1), cancels both, and starts
the killed coordinator again as the next standby. The figure is t1 - t0: the lease expiring
unrenewed, the standby's next look at it, taking office, adopting, one scheduler pass.

    python -m bench.failover [--runs 5] [--database-url postgresql://...]

A run on real nodes replaces `kill_9` with a step that kills the leader's pod or node.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import yaml

from appliance._proto.v1 import cluster_pb2, cluster_pb2_grpc, common_pb2
from bench.common import CoordinatorProcess, emit, fresh_dir, summarize_ms

GOAL_S = 15.0
PARAMS = yaml.safe_dump({"model": {"name": "fc_mnist", "hidden_sizes": [16]}})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Coordinators:
    """Two coordinators on one store and one data dir, on fixed ports (so that each can be
    started again where it was, and replicas know both addresses)."""

    def __init__(self, data_dir: Path, database_url: str, env: dict[str, str] | None = None):
        self.data_dir = data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        self.ports = [(free_port(), free_port()) for _ in range(2)]
        addresses = ",".join(f"127.0.0.1:{grpc_port}" for grpc_port, _ in self.ports)
        self.env = {
            "APPLIANCE_DATABASE_URL": database_url,
            "APPLIANCE_COORDINATOR_ADDRESS": addresses,
            **(env or {}),
        }
        self.procs: list[CoordinatorProcess | None] = [None, None]

    def start(self, index: int) -> CoordinatorProcess:
        proc = CoordinatorProcess(
            self.data_dir, extra_env=self.env, ports=self.ports[index],
            log_name=f"coordinator-{index}.log",
        )  # fmt: skip
        proc.wait_address()
        self.procs[index] = proc
        return proc

    def address(self, index: int) -> str:
        return f"127.0.0.1:{self.ports[index][0]}"

    def ready(self, index: int) -> bool:
        """Whether coordinator `index` answers /readyz with 200 (it leads)."""
        url = f"http://127.0.0.1:{self.ports[index][1]}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def wait_leader(self, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for index, proc in enumerate(self.procs):
                if proc is not None and proc.proc.poll() is None and self.ready(index):
                    return index
            time.sleep(0.05)
        raise TimeoutError("no coordinator became the leader")

    def stop(self) -> None:
        for proc in self.procs:
            if proc is not None:
                proc.stop()


# Kills the leading coordinator (index) of the pair; returns when it did (time.time()).
KillLeader = Callable[[Coordinators, int], float]


def kill_9(pair: Coordinators, leader: int) -> float:
    """kill -9 of the leader's process, as an OOM kill or a crash would end it."""
    proc = pair.procs[leader]
    assert proc is not None
    os.kill(proc.pid, signal.SIGKILL)
    killed = time.time()
    proc.proc.wait(10)
    pair.procs[leader] = None
    return killed


def submit(stub: cluster_pb2_grpc.ClusterServiceStub, steps: int, timeout: float) -> str:
    """Submit a 1-CS-2 job, retrying while the coordinator stands by (UNAVAILABLE)."""
    spec = cluster_pb2.JobSpec(params_yaml=PARAMS, num_csx=1, num_steps=steps)
    request = cluster_pb2.SubmitJobRequest(spec=spec, user="bench")
    deadline = time.monotonic() + timeout
    while True:
        try:
            return str(stub.SubmitJob(request, timeout=5).id)
        except grpc.RpcError as err:
            if err.code() is not grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def phase_time(stub: cluster_pb2_grpc.ClusterServiceStub, job_id: str, phase: str) -> float:
    """When the job entered `phase` (its event's time), waiting for it up to 60 s."""
    wanted = common_pb2.Phase.Value(f"PHASE_{phase}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        request = cluster_pb2.GetJobEventsRequest(job_id=job_id)
        for event in stub.GetJobEvents(request, timeout=10).events:
            if event.kind == cluster_pb2.JOB_EVENT_KIND_PHASE and event.to_phase == wanted:
                return float(event.time)
        time.sleep(0.05)
    raise TimeoutError(f"{job_id} did not reach {phase}")


@contextlib.contextmanager
def stub_of(address: str) -> Iterator[cluster_pb2_grpc.ClusterServiceStub]:
    with grpc.insecure_channel(address) as channel:
        yield cluster_pb2_grpc.ClusterServiceStub(channel)


def one_failover(pair: Coordinators, kill_leader: KillLeader) -> dict[str, Any]:
    leader = pair.wait_leader()
    survivor = 1 - leader
    with stub_of(pair.address(leader)) as stub:
        adopted = submit(stub, 1_000_000, timeout=10)
        phase_time(stub, adopted, "RUNNING")
    killed = kill_leader(pair, leader)
    with stub_of(pair.address(survivor)) as stub:
        fresh = submit(stub, 1_000_000, timeout=60)
        scheduled = phase_time(stub, fresh, "SCHEDULED")
        took_office = time.time()
        kept = stub.GetJob(cluster_pb2.GetJobRequest(job_id=adopted), timeout=10)
        for job_id in (adopted, fresh):
            stub.CancelJob(cluster_pb2.CancelJobRequest(job_id=job_id, reason="bench"), timeout=30)
    if kept.phase != common_pb2.PHASE_RUNNING or kept.attempt != 1:
        raise RuntimeError(f"{adopted} was not adopted: {kept.phase}, attempt {kept.attempt}")
    pair.start(leader)  # the next standby
    return {
        "kill_to_scheduled_s": round(scheduled - killed, 3),
        "killed": leader,
        "checked_after_s": round(took_office - killed, 3),
    }


def measure(
    database_url: str, runs: int, kill_leader: KillLeader = kill_9
) -> list[dict[str, Any]]:
    """`runs` failovers of a fresh pair of coordinators on `database_url`."""
    pair = Coordinators(fresh_dir("failover"), database_url)
    try:
        pair.start(0)
        pair.wait_leader()
        pair.start(1)
        return [one_failover(pair, kill_leader) for _ in range(runs)]
    finally:
        pair.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--database-url", default="", help="default: a throwaway server")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        url = args.database_url
        if not url:
            from tests.postgres import postgres_server

            server = stack.enter_context(postgres_server())
            url = stack.enter_context(server.fresh_database())
        runs = measure(url, args.runs)
    seconds = [r["kill_to_scheduled_s"] for r in runs]
    summary = summarize_ms(seconds)
    emit(
        "failover",
        {
            "goal": f"kill -9 of the leader -> a new job SCHEDULED <= {GOAL_S:.0f} s",
            "runs": len(runs),
            "median_s": round(sorted(seconds)[len(seconds) // 2], 3),
            "worst_s": max(seconds),
            "kill_to_scheduled": summary,
            "met": max(seconds) <= GOAL_S,
            "lease": "duration 8 s, renew deadline 5 s, retry period 1 s (the defaults)",
            "store": "PostgreSQL (local throwaway server)",
            "backend": "local",
            "runs_detail": runs,
        },
    )  # fmt: skip


if __name__ == "__main__":
    main()
