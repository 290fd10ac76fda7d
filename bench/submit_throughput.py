"""Goal 1: SubmitJob throughput over gRPC, 50 concurrent clients, SQLite: >= 500 jobs/s.

Every CS-2 system is put in maintenance before the coordinator starts, so the jobs stay QUEUED
(the scheduler still runs its passes: that is part of the cost). Each client has its own
channel (its own HTTP/2 connection) and submits back to back until the shared count is reached.
After the run the coordinator is stopped and the jobs are counted in the SQLite file itself:
only jobs persisted as QUEUED count.

    python -m bench.submit_throughput [--jobs 5000] [--clients 50] [--runs 3]
        [--trees b35e5b1,HEAD]   # other commits' coordinators measured side by side; the
                                 # goal is judged on the last tree
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import grpc

from appliance._proto.v1 import cluster_pb2, cluster_pb2_grpc, common_pb2
from bench.common import (
    EXAMPLE_PARAMS,
    SYSTEMS,
    CoordinatorProcess,
    commit_tree,
    emit,
    fresh_dir,
    median_run,
    prepare_store_with,
    summarize_ms,
)

GOAL_JOBS_PER_S = 500.0


async def load(address: str, jobs: int, clients: int, time_limit: float) -> dict[str, Any]:
    request = cluster_pb2.SubmitJobRequest(
        spec=cluster_pb2.JobSpec(
            params_yaml=EXAMPLE_PARAMS.read_text(),
            num_csx=1,
            num_steps=100,
            mode=common_pb2.MODE_TRAIN,
            labels={"bench": "submit"},
        ),
        user="bench",
    )
    channels = [grpc.aio.insecure_channel(address) for _ in range(clients)]
    stubs = [cluster_pb2_grpc.ClusterServiceStub(ch) for ch in channels]
    await asyncio.gather(*(ch.channel_ready() for ch in channels))
    # Warm-up: one call per connection (not timed).
    await asyncio.gather(*(stub.GetVersion(cluster_pb2.GetVersionRequest()) for stub in stubs))
    remaining = jobs
    latencies: list[float] = []
    errors: dict[str, int] = {}
    deadline = time.monotonic() + time_limit

    async def client(stub: cluster_pb2_grpc.ClusterServiceStub) -> None:
        nonlocal remaining
        while remaining > 0 and time.monotonic() < deadline:
            remaining -= 1
            t0 = time.perf_counter()
            try:
                await stub.SubmitJob(request, timeout=30)
            except grpc.aio.AioRpcError as exc:
                errors[exc.code().name] = errors.get(exc.code().name, 0) + 1
                continue
            latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    await asyncio.gather(*(client(stub) for stub in stubs))
    elapsed = time.perf_counter() - start
    await asyncio.gather(*(ch.close() for ch in channels))
    return {
        "elapsed_s": round(elapsed, 3),
        "acked": len(latencies),
        "errors": errors,
        "acked_per_s": round(len(latencies) / elapsed, 1),
        "latency": summarize_ms(latencies) if latencies else {},
    }


def measure(
    tree: Path | None, jobs: int, clients: int, time_limit: float, profile: Path | None
) -> dict[str, Any]:
    """One run of the load against the coordinator of `tree` (None: this checkout)."""
    data_dir = fresh_dir("submit")
    prepare_store_with(tree, data_dir, SYSTEMS)
    coordinator = CoordinatorProcess(data_dir, profile=profile, tree=tree)
    try:
        address = coordinator.wait_address()
        cpu_before = coordinator.thread_cpu()
        own_before = time.process_time()
        run = asyncio.run(load(address, jobs, clients, time_limit))
        own_cpu = time.process_time() - own_before
        cpu_after = coordinator.thread_cpu()
        rss = coordinator.rss_bytes()
    finally:
        coordinator.stop()
    cpu = {k: round(v - cpu_before.get(k, 0.0), 2) for k, v in cpu_after.items()}
    cpu = {k: v for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]) if v > 0}
    db = sqlite3.connect(data_dir / "appliance.db")
    try:
        persisted = dict(
            db.execute(
                'SELECT phase, count(*) FROM jobs WHERE labels LIKE \'%"bench": "submit"%\''
                " GROUP BY phase"
            ).fetchall()
        )
        events = db.execute("SELECT count(*) FROM job_events").fetchone()[0]
    finally:
        db.close()
    queued = persisted.get("QUEUED", 0)
    return {
        **run,
        "persisted_by_phase": persisted,
        "events_rows": events,
        "persisted_queued_per_s": round(queued / run["elapsed_s"], 1),
        "all_persisted": queued == jobs,
        "coordinator_rss_mb": round(rss / 2**20, 1),
        "coordinator_cpu_s": round(sum(cpu.values()), 2),
        "coordinator_cpu_s_by_thread": cpu,
        "loadgen_cpu_s": round(own_cpu, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--time-limit", type=float, default=90.0)
    parser.add_argument("--runs", type=int, default=1, help="runs of each tree, interleaved")
    parser.add_argument(
        "--trees", default="HEAD",
        help="commits to measure side by side, comma-separated (HEAD: this checkout)",
    )  # fmt: skip
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument("--profile", type=Path, help="cProfile this checkout's coordinator")
    args = parser.parse_args()

    trees = [(ref, commit_tree(ref) if ref != "HEAD" else ("HEAD", None))
             for ref in args.trees.split(",")]  # fmt: skip
    runs: dict[str, list[dict[str, Any]]] = {commit: [] for _, (commit, _) in trees}
    for _ in range(args.runs):  # interleaved, so that a busy moment hits every tree alike
        for _, (commit, tree) in trees:
            profile = args.profile if tree is None else None
            runs[commit].append(measure(tree, args.jobs, args.clients, args.time_limit, profile))
            print(json.dumps({commit: runs[commit][-1]["persisted_queued_per_s"]}), flush=True)
    by_tree = {commit: median_run(tree_runs, "persisted_queued_per_s")
               for commit, tree_runs in runs.items()}  # fmt: skip
    for commit, tree_runs in runs.items():
        by_tree[commit]["runs_per_s"] = [r["persisted_queued_per_s"] for r in tree_runs]
    mine = by_tree[trees[-1][1][0]]
    emit(
        "submit_throughput",
        {
            "goal": f">= {GOAL_JOBS_PER_S:.0f} jobs/s persisted (QUEUED), "
            f"{args.clients} concurrent gRPC clients, SQLite",
            "jobs": args.jobs,
            "clients": args.clients,
            "runs": args.runs,
            "trees": by_tree,
            # The last tree's median run, as the results table reads it.
            **{key: mine[key] for key in ("elapsed_s", "persisted_by_phase", "latency")},
            "persisted_queued_per_s": mine["persisted_queued_per_s"],
            "profiled": args.profile is not None,
            "met": mine["persisted_queued_per_s"] >= GOAL_JOBS_PER_S and mine["all_persisted"],
        },
    )


if __name__ == "__main__":
    main()
