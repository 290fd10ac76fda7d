"""Bulk cancel of 10,000 queued jobs over gRPC, 50 concurrent clients: goal >= 1,600 jobs/s.

Every CS-2 system is in maintenance, so the submitted jobs stay QUEUED. The jobs are submitted
first (not timed), then every one is cancelled with CancelJob from 50 concurrent clients; the
rate counts the jobs found CANCELLED in the SQLite file after the coordinator stopped. The
whole thing is repeated (`--runs`, each on a fresh store and coordinator) and judged on the
median run; the coordinator's CPU seconds per thread during the cancels are recorded too.

    python -m bench.bulk_cancel [--jobs 10000] [--clients 50] [--runs 3] [--no-record]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

import grpc

from appliance._proto.v1 import cluster_pb2, cluster_pb2_grpc
from bench.common import (
    SYSTEMS,
    CoordinatorProcess,
    emit,
    fresh_dir,
    median_run,
    phase_counts,
    prepare_store,
    summarize_ms,
)
from bench.submit_throughput import load as submit_load

GOAL_JOBS_PER_S = 1600.0


async def active_job_ids(stub: cluster_pb2_grpc.ClusterServiceStub) -> list[str]:
    """The ids of every active job (StreamJobs with the default view)."""
    return [
        job.id
        async for page in stub.StreamJobs(cluster_pb2.ListJobsRequest())
        for job in page.jobs
    ]


async def cancel_all(address: str, clients: int, time_limit: float) -> dict[str, Any]:
    channels = [grpc.aio.insecure_channel(address) for _ in range(clients)]
    stubs = [cluster_pb2_grpc.ClusterServiceStub(ch) for ch in channels]
    await asyncio.gather(*(ch.channel_ready() for ch in channels))
    ids = await active_job_ids(stubs[0])
    pending = list(ids)
    latencies: list[float] = []
    errors: dict[str, int] = {}
    deadline = time.monotonic() + time_limit

    async def client(stub: cluster_pb2_grpc.ClusterServiceStub) -> None:
        while pending and time.monotonic() < deadline:
            job_id = pending.pop()
            t0 = time.perf_counter()
            try:
                await stub.CancelJob(cluster_pb2.CancelJobRequest(job_id=job_id), timeout=30)
            except grpc.aio.AioRpcError as exc:
                errors[exc.code().name] = errors.get(exc.code().name, 0) + 1
                continue
            latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    await asyncio.gather(*(client(stub) for stub in stubs))
    elapsed = time.perf_counter() - start
    await asyncio.gather(*(ch.close() for ch in channels))
    return {
        "listed": len(ids),
        "cancel_elapsed_s": round(elapsed, 3),
        "cancel_acked": len(latencies),
        "errors": errors,
        "latency": summarize_ms(latencies) if latencies else {},
    }


def run_once(args: argparse.Namespace) -> dict[str, Any]:
    data_dir = fresh_dir("cancel")
    prepare_store(data_dir, maintenance=SYSTEMS)
    coordinator = CoordinatorProcess(data_dir, profile=args.profile)
    try:
        address = coordinator.wait_address()
        submitted = asyncio.run(submit_load(address, args.jobs, args.clients, args.time_limit))
        cpu_before = coordinator.thread_cpu()
        run = asyncio.run(cancel_all(address, args.clients, args.time_limit))
        cpu_after = coordinator.thread_cpu()
    finally:
        coordinator.stop()
    phases = phase_counts(data_dir)
    cancelled = phases.get("CANCELLED", 0)
    rate = cancelled / run["cancel_elapsed_s"]
    cpu = {k: round(v - cpu_before.get(k, 0.0), 2) for k, v in cpu_after.items()}
    return {
        "submitted_acked": submitted["acked"],
        **run,
        "phases_after": phases,
        "coordinator_cpu_s": {k: v for k, v in cpu.items() if v >= 0.05},
        "cancelled_per_s": round(rate, 1),
        "met": rate >= GOAL_JOBS_PER_S and cancelled == args.jobs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument(
        "--runs", type=int, default=3, help="independent runs; the median one is recorded"
    )
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument("--profile", type=Path, help="cProfile the coordinator into this file")
    args = parser.parse_args()

    runs = [run_once(args) for _ in range(args.runs)]
    median = median_run(runs, "cancelled_per_s")
    emit(
        "bulk_cancel",
        {
            "goal": f">= {GOAL_JOBS_PER_S:.0f} jobs/s cancelled, {args.clients} gRPC clients",
            "jobs": args.jobs,
            "clients": args.clients,
            **median,
            "judged_on": f"median of {len(runs)} runs (each a fresh store and coordinator)",
            "runs": [
                {
                    "cancelled_per_s": r["cancelled_per_s"],
                    "cancel_elapsed_s": r["cancel_elapsed_s"],
                    "p99_ms": r["latency"].get("p99_ms"),
                    "met": r["met"],
                }
                for r in runs
            ],
        },
    )


if __name__ == "__main__":
    main()
