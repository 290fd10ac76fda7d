"""B3, the whole pipeline (#18): jobs taken from QUEUED to SUCCEEDED per second through
`appliance serve` with the simulated backend, 10,000 queued behind.

    python -m bench.pipeline [--queued 10000] [--measure 3000] [--trees HEAD,2d52993]

The coordinator is its own process: APPLIANCE_BACKEND=sim with step time 0 (a job ends as
soon as it runs), 64 systems, 32 MemoryX, 16 SwarmX. Every system starts in maintenance, so
the `--queued` jobs (mixed 1-16-system gangs, P1-P3) are all queued first; then every system
is put back in service, and the rate is taken from the store's events over the first
`--measure` jobs to succeed (between 10% and 90% of them), with the rest still queued behind.
Reported beside it: the time from SCHEDULED to SUCCEEDED per job (p50), the jobs in flight it
implies, and the scheduler's pass p50/p99 (APPLIANCE_SCHEDULER_TRACE).

While the jobs drain, a probe process of its own submits a job and makes the default
ListJobs call (active jobs, the server's limit) every 100 ms, each timed: the issue's
"submit p99 and ListJobs p99 <= 100 ms during B3".

Each tree (`--trees`: commits unpacked with `git archive`, or HEAD for this checkout) runs on
the same workload in the same run, so old and new are measured side by side.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import multiprocessing.synchronize
import os
import signal
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import (
    EXAMPLE_PARAMS,
    WORK,
    CoordinatorProcess,
    code_tree,
    cpu_ms_per_job,
    emit,
    fresh_dir,
    percentile,
    prepare_store_with,
)

SIZES = [1, 1, 2, 2, 4, 4, 8, 16]
PRIORITIES = ["P1", "P2", "P2", "P3"]
PROBE_INTERVAL = 0.1  # a submit and a listing every 100 ms: a few users at their terminals


def pool(systems: int) -> dict[str, str]:
    """The issue's pools: half as many MemoryX as systems, a quarter as many SwarmX."""
    return {
        "APPLIANCE_SYSTEMS": str(systems),
        "APPLIANCE_MEMORYX_NODES": str(systems // 2),
        "APPLIANCE_SWARMX_NODES": str(systems // 4),
    }


def system_names(systems: int) -> list[str]:
    return [f"cs2-{i:02d}" for i in range(1, systems + 1)]


def _probe(address: str, stop: multiprocessing.synchronize.Event, results: Any) -> None:
    """Submit one job and list the default view, back to back, until told to stop."""
    import grpc

    from appliance._proto.v1 import cluster_pb2, cluster_pb2_grpc
    from appliance.client import ApplianceClient

    client = ApplianceClient(address, insecure=True)
    stub = cluster_pb2_grpc.ClusterServiceStub(grpc.insecure_channel(address))
    submits: list[float] = []
    lists: list[float] = []
    while not stop.wait(PROBE_INTERVAL):
        began = time.perf_counter()
        client.submit(EXAMPLE_PARAMS, num_csx=1, num_steps=1, detach=True)
        submits.append(time.perf_counter() - began)
        began = time.perf_counter()
        stub.ListJobs(cluster_pb2.ListJobsRequest())  # the default view, as csctl asks for it
        lists.append(time.perf_counter() - began)
    results.put({"submit": submits, "list": lists})


def _fill(address: str, count: int) -> None:
    """Queue `count` jobs from 8 threads (the queue is the benchmark's setup, not timed)."""
    from appliance.client import ApplianceClient

    client = ApplianceClient(address, insecure=True)

    def one(i: int) -> None:
        client.submit(
            EXAMPLE_PARAMS, num_csx=SIZES[i % len(SIZES)], num_steps=1, detach=True,
            priority=PRIORITIES[i % len(PRIORITIES)],
        )  # fmt: skip

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(count)))
    client.close()


def run(
    tree: Path | None,
    queued: int,
    measure: int,
    systems: int = 64,
    profile: Path | None = None,
    py_spy: Path | None = None,
) -> dict[str, Any]:
    """One tree's run; `profile`: cProfile the whole coordinator; `py_spy`: sample it with
    py-spy while the jobs drain (collapsed stacks, every thread)."""
    from appliance.client import ApplianceClient

    data_dir = fresh_dir("pipeline")
    trace = data_dir / "passes.jsonl"
    nodes = pool(systems)
    env = {
        **nodes, "APPLIANCE_BACKEND": "sim", "APPLIANCE_SIM_STEP_SECONDS": "0",
        "APPLIANCE_SCHEDULER_TRACE": str(trace),
    }  # fmt: skip
    os.environ.update(nodes)  # prepare_store reads the same pool
    names = system_names(systems)
    prepare_store_with(tree, data_dir, names)
    spawn = multiprocessing.get_context("spawn")
    with CoordinatorProcess(data_dir, extra_env=env, tree=tree, profile=profile) as coordinator:
        address = coordinator.wait_address()
        _fill(address, queued)
        stop, results = spawn.Event(), spawn.Queue()
        probe = spawn.Process(target=_probe, args=(address, stop, results))
        probe.start()
        client = ApplianceClient(address, insecure=True)
        with ThreadPoolExecutor(8) as reopen:  # 2,048 systems back within a second or two
            list(reopen.map(lambda name: client.set_node_state(name, "ok"), names))
        # Rates, CPU and samples count from here: 2,048 admin calls are not the load.
        reopened = time.time()
        cpu_before = coordinator.thread_cpu()
        db = sqlite3.connect(f"file:{data_dir / 'appliance.db'}?mode=ro", uri=True)
        succeeded = "SELECT count(*) FROM jobs WHERE phase = 'SUCCEEDED'"
        done_before = db.execute(succeeded).fetchone()[0]
        spy = _py_spy(coordinator.pid, py_spy) if py_spy else None
        deadline = time.monotonic() + 120 + measure
        done, grew, queued_left = 0, time.monotonic(), -1
        # Also stops when none of the queued jobs has ended for 10 s (the probe's own jobs go
        # on ending): jobs that ended while the systems were coming back (slow on a loaded
        # machine) are not there to be measured.
        left = f"SELECT count(*) FROM jobs WHERE phase != 'SUCCEEDED' AND created_at < {reopened}"
        while time.monotonic() < deadline and done < measure and time.monotonic() - grew < 10:
            time.sleep(0.25)  # polling the store from outside, not synchronising anything
            done = db.execute(succeeded).fetchone()[0] - done_before
            now_left = db.execute(left).fetchone()[0]
            grew = time.monotonic() if now_left != queued_left else grew
            queued_left = now_left
        cpu = cpu_ms_per_job(cpu_before, coordinator.thread_cpu(), done)
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        stop.set()
        probed = results.get(timeout=60)
        probe.join(30)
        rss = coordinator.rss_bytes()
        rows = db.execute(
            "SELECT job_id, to_phase, time FROM job_events WHERE to_phase IN "
            "('SCHEDULED', 'SUCCEEDED') ORDER BY time"
        ).fetchall()
        still_queued = db.execute("SELECT count(*) FROM jobs WHERE phase = 'QUEUED'").fetchone()
        db.close()
    ends = sorted(t for _, phase, t in rows if phase == "SUCCEEDED" and t >= reopened)[:measure]
    scheduled = {j: t for j, phase, t in rows if phase == "SCHEDULED"}
    finished = {j: t for j, phase, t in rows if phase == "SUCCEEDED"}
    per_second = _rate(ends)
    # Decisions (jobs moved to SCHEDULED with their placements) over the same span of jobs.
    decided = _rate(sorted(t for t in scheduled.values() if t >= reopened)[:measure])
    per_job = [finished[j] - scheduled[j] for j in finished if j in scheduled]
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    busy = [p["seconds"] for p in lines if p.get("admitted")]
    ms = [1000 * s for s in probed["submit"]], [1000 * s for s in probed["list"]]
    return {
        "code": "this checkout" if tree is None else tree.name.removeprefix("landed-"),
        "queued": queued,
        "measured_jobs": len(ends),
        "queued_after": still_queued[0],
        "systems": systems,
        "queued_to_succeeded_per_second": round(per_second, 1) if per_second else None,
        "decisions_per_second": round(decided, 1) if decided else None,
        "scheduled_to_succeeded_ms_p50": round(1000 * percentile(per_job, 50), 1),
        "in_flight_mean": round((per_second or 0) * sum(per_job) / len(per_job), 1),
        "pass_ms_p50": round(1000 * percentile(busy, 50), 2) if busy else None,
        "pass_ms_p99": round(1000 * percentile(busy, 99), 2) if busy else None,
        "probe_submit_ms": _summary(ms[0]),
        "probe_list_jobs_ms": _summary(ms[1]),
        "coordinator_rss_mb": round(rss / 2**20, 1),
        "cpu_ms_per_job_by_thread": cpu,
        "goals": _GOALS if systems < 2048 else _GOALS_AT_SCALE,
    }


_GOALS = ">= 500 jobs/s (B3); probe submit and ListJobs p99 <= 100 ms"
_GOALS_AT_SCALE = ">= 1,000 decisions/s and pass p99 <= 100 ms (B3b, 100,000 queued)"


def _rate(times: list[float]) -> float | None:
    """Per second over the middle 80% of `times` (sorted)."""
    if len(times) < 10:
        return None
    low, high = times[len(times) // 10], times[(9 * len(times)) // 10]
    return (len(times) * 0.8) / (high - low) if high > low else None


def _py_spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    spy_bin = str(Path(sys.executable).parent / "py-spy")
    command = [spy_bin, "record", "--pid", str(pid), "--rate", "250", "--threads",
               "--format", "raw", "--output", str(out)]  # fmt: skip
    spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # py-spy attaches (not synchronising: the samples start when they do)
    return spy


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50": round(percentile(values, 50), 2),
            "p99": round(percentile(values, 99), 2)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--measure", type=int, default=3_000)
    parser.add_argument("--systems", type=int, default=64, help="B3b: 2048 (--queued 100000)")
    parser.add_argument("--trees", default="HEAD", help="commits to run, comma-separated")
    parser.add_argument("--profile", type=Path, help="cProfile the (last) coordinator here")
    parser.add_argument("--py-spy", type=Path, help="sample the coordinator while it drains")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    runs = []
    for commit in args.trees.split(","):
        tree = code_tree(commit)
        mine = tree is None
        profile, py_spy = (args.profile, args.py_spy) if mine else (None, None)
        runs.append(run(tree, args.queued, args.measure, args.systems, profile, py_spy))
        print(json.dumps(runs[-1]), flush=True)
    emit("pipeline" if args.systems < 2048 else "pipeline_b3b", {"runs": runs})


if __name__ == "__main__":
    main()
