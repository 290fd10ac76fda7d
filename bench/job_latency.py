"""Goal 3: submit -> RUNNING of a 1-CS-2 job on the local backend (p99 <= 5 s), and cancel of a
running job -> every replica process gone (p99 <= 1 s).

Jobs run one after another on an empty store with the whole pool available. For each job:
SubmitJob returns (t0); WatchJob (opened right after) yields the RUNNING event (t1); then
CancelJob is sent (t2) and the process table is polled every 10 ms until no process's command
line contains the job id (t3). submit_to_running = t1 - t0, cancel_to_gone = t3 - t2.
num_steps is large so no job finishes on its own before it is cancelled.

    python -m bench.job_latency [--jobs 20]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import grpc

from appliance._proto.v1 import cluster_pb2, cluster_pb2_grpc, common_pb2
from bench.common import (
    EXAMPLE_PARAMS,
    CoordinatorProcess,
    emit,
    fresh_dir,
    pids_with,
    prepare_store,
    summarize_ms,
)

GOAL_RUNNING_P99_S = 5.0
GOAL_CANCEL_P99_S = 1.0


def one_job(stub: cluster_pb2_grpc.ClusterServiceStub, request: Any) -> dict[str, Any]:
    job = stub.SubmitJob(request, timeout=30)
    t0 = time.perf_counter()
    phases: dict[str, float] = {}
    running_at = None
    for event in stub.WatchJob(cluster_pb2.WatchJobRequest(job_id=job.id), timeout=60):
        if event.kind != cluster_pb2.JOB_EVENT_KIND_PHASE:
            continue
        name = common_pb2.Phase.Name(event.to_phase).removeprefix("PHASE_")
        phases[name] = round(time.perf_counter() - t0, 3)
        if name == "RUNNING":
            running_at = time.perf_counter()
            break
        if name in ("SUCCEEDED", "FAILED", "CANCELLED"):
            break
    if running_at is None:
        raise RuntimeError(f"{job.id} never reached RUNNING: {phases}")
    replicas = len(pids_with(job.id))
    t2 = time.perf_counter()
    stub.CancelJob(cluster_pb2.CancelJobRequest(job_id=job.id, reason="bench"), timeout=30)
    cancel_returned = time.perf_counter() - t2
    deadline = time.monotonic() + 30
    while pids_with(job.id) and time.monotonic() < deadline:
        time.sleep(0.01)
    gone = time.perf_counter() - t2
    left = pids_with(job.id)
    return {
        "job_id": job.id,
        "submit_to_running_s": running_at - t0,
        "phases_s": phases,
        "replica_processes": replicas,
        "cancel_rpc_s": cancel_returned,
        "cancel_to_gone_s": gone,
        "left_behind": len(left),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument("--profile", type=Path, help="cProfile the coordinator into this file")
    args = parser.parse_args()

    data_dir = fresh_dir("latency")
    prepare_store(data_dir)
    request = cluster_pb2.SubmitJobRequest(
        spec=cluster_pb2.JobSpec(
            params_yaml=EXAMPLE_PARAMS.read_text(), num_csx=1, num_steps=1_000_000,
            labels={"bench": "latency"},
        ),
        user="bench",
    )  # fmt: skip
    runs: list[dict[str, Any]] = []
    coordinator = CoordinatorProcess(data_dir, profile=args.profile)
    deadline = time.monotonic() + 110
    try:
        address = coordinator.wait_address()
        with grpc.insecure_channel(address) as channel:
            stub = cluster_pb2_grpc.ClusterServiceStub(channel)
            grpc.channel_ready_future(channel).result(timeout=30)
            for _ in range(args.jobs):
                if time.monotonic() > deadline:
                    break
                runs.append(one_job(stub, request))
    finally:
        coordinator.stop()
    running = summarize_ms([r["submit_to_running_s"] for r in runs])
    cancel = summarize_ms([r["cancel_to_gone_s"] for r in runs])
    emit(
        "job_latency",
        {
            "goal": f"submit -> RUNNING (1 CS-2, local backend) p99 <= {GOAL_RUNNING_P99_S:.0f} s;"
            f" cancel -> all replica processes gone p99 <= {GOAL_CANCEL_P99_S:.0f} s",
            "jobs": len(runs),
            "replica_processes_per_job": runs[0]["replica_processes"] if runs else 0,
            "submit_to_running": {
                **running, "met": running["p99_ms"] <= GOAL_RUNNING_P99_S * 1000,
            },
            "cancel_to_gone": {**cancel, "met": cancel["p99_ms"] <= GOAL_CANCEL_P99_S * 1000},
            "cancel_rpc": summarize_ms([r["cancel_rpc_s"] for r in runs]),
            "left_behind": sum(r["left_behind"] for r in runs),
            "first_job_phases_s": runs[0]["phases_s"] if runs else {},
            "profiled": args.profile is not None,
        },
    )  # fmt: skip


if __name__ == "__main__":
    main()
