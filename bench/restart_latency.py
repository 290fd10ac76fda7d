"""Restart latency (#15): from a CS-2 replica's death to the job's next attempt RUNNING again,
goal <= 5 s plus the backoff; and the work the restart loses (steps redone after the newest
checkpoint).

Each run submits a 1-CS-2 fc_mnist job allowed one restart, writing a checkpoint every
`--checkpoint-steps`, waits until it has trained past its first checkpoint, SIGKILLs cs2-0 (t0),
and follows the job's events until the RUNNING of attempt 2 (t1), then cancels it. The
coordinator runs with APPLIANCE_RESTART_BACKOFF_SECONDS=0, so the figure is the teardown,
requeue, scheduling, launch and resume alone; add the backoff a cluster configures.

    python -m bench.restart_latency [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from typing import Any

import grpc
import yaml

from appliance._proto.v1 import cluster_pb2, cluster_pb2_grpc, common_pb2
from bench.common import CoordinatorProcess, emit, fresh_dir, prepare_store, summarize_ms

GOAL_S = 5.0
PARAMS = {
    "model": {"name": "fc_mnist", "hidden_sizes": [32]},
    "runconfig": {"checkpoint_steps": 50},
}


def _phase(event: Any) -> str:
    return str(common_pb2.Phase.Name(event.to_phase).removeprefix("PHASE_"))


def one_restart(
    stub: cluster_pb2_grpc.ClusterServiceStub, checkpoint_steps: int
) -> dict[str, Any]:
    params = {**PARAMS, "runconfig": {"checkpoint_steps": checkpoint_steps}}
    spec = cluster_pb2.JobSpec(
        params_yaml=yaml.safe_dump(params), num_csx=1, num_steps=1_000_000, max_restarts=1
    )
    job = stub.SubmitJob(cluster_pb2.SubmitJobRequest(spec=spec, user="bench"), timeout=30)
    get = cluster_pb2.GetJobRequest(job_id=job.id)
    deadline = time.monotonic() + 60
    while stub.GetJob(get, timeout=10).progress.step < checkpoint_steps + 10:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{job.id} did not train past its first checkpoint")
        time.sleep(0.05)
    status = stub.GetJob(get, timeout=10)
    step_at_kill = status.progress.step
    victim = next(r for r in status.replicas if r.name == "cs2-0")
    last_seq = max(
        e.seq for e in stub.GetJobEvents(cluster_pb2.GetJobEventsRequest(job_id=job.id)).events
    )
    os.kill(victim.pid, signal.SIGKILL)
    t0 = time.perf_counter()
    phases: dict[str, float] = {}
    watch = cluster_pb2.WatchJobRequest(job_id=job.id, after_seq=last_seq)
    for event in stub.WatchJob(watch, timeout=60):
        if event.kind != cluster_pb2.JOB_EVENT_KIND_PHASE:
            continue
        phases[_phase(event)] = round(time.perf_counter() - t0, 3)
        if _phase(event) in ("RUNNING", "FAILED", "CANCELLED", "SUCCEEDED"):
            break
    again = stub.GetJob(get, timeout=10)
    stub.CancelJob(cluster_pb2.CancelJobRequest(job_id=job.id, reason="bench"), timeout=30)
    if "RUNNING" not in phases or again.attempt != 2:
        raise RuntimeError(f"{job.id} did not run again: {phases}")
    resumed_at = (step_at_kill // checkpoint_steps) * checkpoint_steps
    return {
        "job_id": job.id,
        "death_to_running_s": phases["RUNNING"],
        "phases_s": phases,
        "step_at_kill": step_at_kill,
        "steps_redone": step_at_kill - resumed_at,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--checkpoint-steps", type=int, default=50)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()

    data_dir = fresh_dir("restart-latency")
    prepare_store(data_dir)
    env = {"APPLIANCE_RESTART_BACKOFF_SECONDS": "0"}
    coordinator = CoordinatorProcess(data_dir, extra_env=env)
    runs: list[dict[str, Any]] = []
    try:
        address = coordinator.wait_address()
        with grpc.insecure_channel(address) as channel:
            stub = cluster_pb2_grpc.ClusterServiceStub(channel)
            grpc.channel_ready_future(channel).result(timeout=30)
            for _ in range(args.runs):
                runs.append(one_restart(stub, args.checkpoint_steps))
    finally:
        coordinator.stop()
    latency = summarize_ms([r["death_to_running_s"] for r in runs])
    emit(
        "restart_latency",
        {
            "goal": f"a replica's death -> the next attempt RUNNING <= {GOAL_S:.0f} s plus the "
            "backoff (here 0)",
            "runs": len(runs),
            "death_to_running": {**latency, "met": latency["p99_ms"] <= GOAL_S * 1000},
            "steps_redone": [r["steps_redone"] for r in runs],
            "checkpoint_steps": args.checkpoint_steps,
            "first_run_phases_s": runs[0]["phases_s"] if runs else {},
        },
    )  # fmt: skip


if __name__ == "__main__":
    main()
