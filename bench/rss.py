"""Goal 4: coordinator RSS with 100,000 jobs in the store: <= 470 MB.

The coordinator (a subprocess) starts on a copy of the seeded store (bench.seed: 100,000 jobs,
10,000 QUEUED; every CS-2 system in maintenance), serves StreamJobs(all=True) of all 100,000
jobs, a ListJobs of all 10,000 active jobs and 200 GetJobs, and then its RSS is read with
psutil. The peak RSS (VmHWM) is reported too.

    python -m bench.rss
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import grpc

from appliance._proto.v1 import cluster_pb2, cluster_pb2_grpc
from appliance.domain.listing import MAX_LIMIT
from bench.common import SYSTEMS, WORK, CoordinatorProcess, emit, prepare_store
from bench.seed import copy_seeded

GOAL_MB = 470.0
OPTIONS = [("grpc.max_receive_message_length", 256 * 1024 * 1024)]


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gets", type=int, default=200)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()

    data_dir = copy_seeded(WORK / "rss")
    prepare_store(data_dir, maintenance=SYSTEMS)
    coordinator = CoordinatorProcess(data_dir)
    try:
        address = coordinator.wait_address()
        time.sleep(3.0)  # the first scheduler pass over the 10,000 queued jobs
        rss_idle = coordinator.rss_bytes()
        ids: list[str] = []
        with grpc.insecure_channel(address, options=OPTIONS) as channel:
            stub = cluster_pb2_grpc.ClusterServiceStub(channel)
            for page in stub.StreamJobs(cluster_pb2.ListJobsRequest(all=True), timeout=90):
                ids.extend(job.id for job in page.jobs)
            stub.ListJobs(cluster_pb2.ListJobsRequest(limit=MAX_LIMIT), timeout=60)
            for job_id in random.Random(1).sample(ids, min(args.gets, len(ids))):
                stub.GetJob(cluster_pb2.GetJobRequest(job_id=job_id), timeout=30)
        time.sleep(2.5)  # one more scheduler pass
        rss = coordinator.rss_bytes()
        peak = peak_rss_mb(coordinator.pid)
    finally:
        coordinator.stop()
    rss_mb = round(rss / 2**20, 1)
    emit(
        "rss",
        {
            "goal": f"coordinator RSS <= {GOAL_MB:.0f} MB with 100,000 jobs in the store",
            "jobs_streamed": len(ids),
            "get_jobs": args.gets,
            "rss_after_start_mb": round(rss_idle / 2**20, 1),
            "rss_mb": rss_mb,
            "peak_rss_mb": peak,
            "met": rss_mb <= GOAL_MB,
        },
    )


if __name__ == "__main__":
    main()
