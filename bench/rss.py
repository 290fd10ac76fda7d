"""Goal 4: coordinator RSS with 100,000 jobs in the store: <= 470 MB; and with 100,000 QUEUED.

Two stores, each a copy of a seeded template (bench.seed), every CS-2 system in maintenance:
100,000 jobs of which 10,000 QUEUED (`rss`, as ever), and 100,000 jobs all QUEUED
(`queued_100k`: the queue index then holds every job). On each the coordinator (a
subprocess) starts, and once the scheduler has decided on the queue (the newest queued job's
pending reason is the scheduler's, not the seeded one) and the coordinator has rendered the
history ahead (its log says so, when its code does), it serves StreamJobs(all=True) of all
100,000 jobs, a ListJobs of 10,000 active jobs and 200 GetJobs; after one more scheduler pass
its RSS is read with psutil. The peak RSS (VmHWM) is reported too. `--compare COMMIT` runs
both again under that commit's code (`git archive`), for a before/after in the same run.

    python -m bench.rss [--gets 200] [--compare REV]
"""

from __future__ import annotations

import argparse
import os
import random
import time
from pathlib import Path
from typing import Any

import grpc

from appliance._proto.v1 import cluster_pb2, cluster_pb2_grpc
from appliance.domain.listing import MAX_LIMIT
from bench.common import SYSTEMS, WORK, CoordinatorProcess, code_tree, emit, prepare_store
from bench.seed import copy_seeded

GOAL_MB = 470.0
OPTIONS = [("grpc.max_receive_message_length", 256 * 1024 * 1024)]
SEEDED_REASON = "needs 4 systems, 0 free"  # bench.seed's pending reason of a queued job
RENDERED_AHEAD = "ahead of the first listing"  # the coordinator's log line, once it did


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def wait_until(done: Any, what: str, timeout: float = 120.0) -> float:
    """Poll `done()` every 50 ms; the seconds it took."""
    started = time.monotonic()
    while not done():
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.05)
    return round(time.monotonic() - started, 2)


def measure(queued: int, gets: int, tree: Path | None) -> dict[str, Any]:
    data_dir = copy_seeded(WORK / "rss", 100_000, queued)
    prepare_store(data_dir, maintenance=SYSTEMS)
    coordinator = CoordinatorProcess(data_dir, tree=tree)
    out: dict[str, Any] = {"queued": queued}
    try:
        address = coordinator.wait_address()
        ids: list[str] = []
        with grpc.insecure_channel(address, options=OPTIONS) as channel:
            stub = cluster_pb2_grpc.ClusterServiceStub(channel)
            grpc.channel_ready_future(channel).result(timeout=30)
            newest = stub.ListJobs(cluster_pb2.ListJobsRequest(limit=1), timeout=120).jobs[0]
            request = cluster_pb2.GetJobRequest(job_id=newest.id)
            out["first_pass_after_s"] = wait_until(
                lambda: stub.GetJob(request, timeout=60).pending_reason != SEEDED_REASON,
                "the scheduler's first pass",
            )
            if tree is None:
                log = coordinator.log_path
                out["rendered_ahead_after_s"] = wait_until(
                    lambda: RENDERED_AHEAD in log.read_text(errors="replace"),
                    "the history rendered ahead",
                )
            out["rss_after_start_mb"] = round(coordinator.rss_bytes() / 2**20, 1)
            for page in stub.StreamJobs(cluster_pb2.ListJobsRequest(all=True), timeout=90):
                ids.extend(job.id for job in page.jobs)
            stub.ListJobs(cluster_pb2.ListJobsRequest(limit=MAX_LIMIT), timeout=60)
            for job_id in random.Random(1).sample(ids, min(gets, len(ids))):
                stub.GetJob(cluster_pb2.GetJobRequest(job_id=job_id), timeout=30)
        # One more scheduler pass (every 2 s while nothing changes): nothing to wait on.
        time.sleep(2.5)
        rss_mb = round(coordinator.rss_bytes() / 2**20, 1)
        out.update(
            jobs_streamed=len(ids),
            get_jobs=gets,
            rss_mb=rss_mb,
            peak_rss_mb=peak_rss_mb(coordinator.pid),
            met=rss_mb <= GOAL_MB,
            load_avg_1m=round(os.getloadavg()[0], 2),
        )
    finally:
        coordinator.stop()
    print(f"queued={queued}", "tree" if tree else "current", out, flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gets", type=int, default=200)
    parser.add_argument("--compare", help="a commit to measure too (before/after)")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()

    ten_k = measure(10_000, args.gets, None)
    result: dict[str, Any] = {
        "goal": f"coordinator RSS <= {GOAL_MB:.0f} MB with 100,000 jobs in the store (10,000 "
        "QUEUED, and all 100,000 QUEUED: queued_100k)",
        **{k: v for k, v in ten_k.items() if k != "queued"},
        "queued_100k": measure(100_000, args.gets, None),
    }
    if args.compare:
        tree = code_tree(args.compare)
        result["compared"] = {
            "commit": args.compare,
            "queued_10k": measure(10_000, args.gets, tree),
            "queued_100k": measure(100_000, args.gets, tree),
        }
    emit("rss", result)


if __name__ == "__main__":
    main()
