"""The scheduler at cluster scale (#18): the landed scheduler and this one side by side, and the
whole pipeline through `appliance serve` with the simulated backend.

    python -m bench.scheduler_scale [--landed de2a58e] [--passes 20] [--pipeline-jobs 2000]

1. Passes (B4, B3b at the scheduler, rows written): bench/scheduler_passes.py run as its own
   process under each code tree (the landed commit, unpacked with `git archive`, and this
   one) on the same workload: 1k, 10k and 100k queued on 64 systems, and 100k on 2,048
   systems (1,024 MemoryX, 512 SwarmX). Cost per decision, its log-log slope from 1k to 100k,
   decisions/s, pass p50/p99 and rows written per decision.
2. Pipeline (B3): `appliance serve` as its own process, APPLIANCE_BACKEND=sim with step time 0,
   64 systems; `--pipeline-jobs` zero-duration jobs submitted at once; jobs taken from QUEUED
   to SUCCEEDED per second (from the store's events, between 10% and 90% done), the time per
   job, and the scheduler's pass p99 (APPLIANCE_SCHEDULER_TRACE).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import sqlite3
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

from bench.common import (
    EXAMPLE_PARAMS,
    ROOT,
    WORK,
    CoordinatorProcess,
    emit,
    fresh_dir,
    percentile,
)

PASSES = ROOT / "bench" / "scheduler_passes.py"
SIZES = [
    (1_000, 64, 32, 16),
    (10_000, 64, 32, 16),
    (100_000, 64, 32, 16),
    (100_000, 2048, 1024, 512),
]


def landed_tree(commit: str) -> Path:
    """The landed code, unpacked once from git (no worktree left behind)."""
    tree = WORK / f"landed-{commit}"
    if not (tree / "appliance").is_dir():
        data = subprocess.run(
            ["git", "archive", commit], cwd=ROOT, capture_output=True, check=True
        )
        with tarfile.open(fileobj=io.BytesIO(data.stdout)) as archive:
            archive.extractall(tree, filter="data")
    return tree


def passes(tree: Path, queued: int, systems: int, memoryx: int, swarmx: int, count: int) -> Any:
    sizes = ["--queued", queued, "--systems", systems, "--memoryx", memoryx, "--swarmx", swarmx]
    command = [sys.executable, str(PASSES), *map(str, sizes), "--passes", str(count)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(command, env=env, cwd=WORK, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def slope(runs: list[dict[str, Any]]) -> float | None:
    """Log-log slope of ms per decision from the smallest to the largest queue."""
    first, last = runs[0], runs[-1]
    if not first["ms_per_decision"] or not last["ms_per_decision"]:
        return None
    rise = math.log(last["ms_per_decision"] / first["ms_per_decision"])
    return round(rise / math.log(last["queued"] / first["queued"]), 3)


def pipeline(jobs: int) -> dict[str, Any]:
    from appliance.client import ApplianceClient  # the benchmark's own client, after the trees

    data_dir = fresh_dir("scheduler-pipeline")
    trace = data_dir / "passes.jsonl"
    env = {
        "APPLIANCE_BACKEND": "sim", "APPLIANCE_SIM_STEP_SECONDS": "0",
        "APPLIANCE_SYSTEMS": "64", "APPLIANCE_MEMORYX_NODES": "32", "APPLIANCE_SWARMX_NODES": "16",
        "APPLIANCE_SCHEDULER_TRACE": str(trace),
    }  # fmt: skip
    sizes = [1, 1, 2, 2, 4, 4, 8, 16]
    with CoordinatorProcess(data_dir, extra_env=env) as coordinator:
        client = ApplianceClient(coordinator.wait_address())
        for i in range(jobs):
            client.submit(EXAMPLE_PARAMS, num_csx=sizes[i % len(sizes)], num_steps=1, detach=True)
        deadline = time.monotonic() + 30 + jobs
        db = sqlite3.connect(f"file:{data_dir / 'appliance.db'}?mode=ro", uri=True)
        while time.monotonic() < deadline:
            done = db.execute("SELECT count(*) FROM jobs WHERE phase = 'SUCCEEDED'").fetchone()[0]
            if done >= jobs:
                break
            time.sleep(0.5)  # polling the store from outside, not synchronising the coordinator
        rows = db.execute(
            "SELECT job_id, to_phase, time FROM job_events WHERE to_phase IN "
            "('QUEUED', 'SCHEDULED', 'SUCCEEDED') ORDER BY time"
        ).fetchall()
        db.close()
    ends = sorted(t for _, phase, t in rows if phase == "SUCCEEDED")
    scheduled = {j: t for j, phase, t in rows if phase == "SCHEDULED"}
    finished = {j: t for j, phase, t in rows if phase == "SUCCEEDED"}
    low, high = ends[len(ends) // 10], ends[(9 * len(ends)) // 10]
    per_second = (len(ends) * 0.8) / (high - low) if high > low else None
    per_job = [finished[j] - scheduled[j] for j in finished if j in scheduled]
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    busy = [p["seconds"] for p in lines if p["admitted"]]
    return {
        "jobs": jobs,
        "succeeded": len(ends),
        "queued_to_succeeded_per_second": round(per_second, 1) if per_second else None,
        "scheduled_to_succeeded_ms_p50": round(1000 * percentile(per_job, 50), 1),
        "in_flight_mean": round((per_second or 0) * sum(per_job) / len(per_job), 1),
        "pass_ms_p50": round(1000 * percentile(busy, 50), 2) if busy else None,
        "pass_ms_p99": round(1000 * percentile(busy, 99), 2) if busy else None,
        "goal": ">= 500 jobs/s QUEUED -> SUCCEEDED (B3)",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landed", default="de2a58e", help="the landed commit to compare with")
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--pipeline-jobs", type=int, default=2000)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    trees = {"landed": landed_tree(args.landed), "current": ROOT}
    result: dict[str, Any] = {"landed_commit": args.landed, "passes": {}}
    for name, tree in trees.items():
        runs = []
        for queued, systems, memoryx, swarmx in SIZES:
            if name == "landed" and queued * systems > 10_000 * 64:
                continue  # the landed pass at 100k takes seconds; its trend is clear by 100k/64
            count = args.passes if queued <= 10_000 else max(3, args.passes // 4)
            runs.append(passes(tree, queued, systems, memoryx, swarmx, count))
            print(name, json.dumps(runs[-1]), flush=True)
        on_64 = [r for r in runs if r["systems"] == 64]
        result["passes"][name] = {"runs": runs, "slope_1k_to_100k": slope(on_64)}
    result["pipeline"] = pipeline(args.pipeline_jobs)
    emit("scheduler_scale", result)


if __name__ == "__main__":
    main()
