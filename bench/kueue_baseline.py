"""B7, Kueue's scheduler-performance baseline through `appliance serve` (#38).

    python -m bench.kueue_baseline [--scale 1.0] [--trees HEAD,b7d558e]
        [--submitters 4] [--threads 16]

The workload is Kueue's own (kubernetes-sigs/kueue at ff69552e79ad21652c36caa97038382e55625cf7,
test/performance/scheduler/configs/baseline/generator.yaml), its published means from
rangespec.yaml beside it (the mean of 5 runs): 5 cohorts x 6 ClusterQueues, nominal quota 20
each, borrowing limit 20 x 5 = 100, reclaim within the cohort, preemption of lower priority
within a queue. Per queue three workload sets, each workload created one interval after the
one before it (the first after one interval):

    class   count  interval  request  runtime  priority  ->  here
    small     350    100 ms        1   200 ms        50      P3, 1 CS-2 system
    medium    100    500 ms        5   500 ms       100      P2, 5 systems
    large      50  1,200 ms       20 1,000 ms       200      P1, 20 systems

Translated: 1 unit = 1 CS-2 system; 30 queues of quota 20 (600 systems) that lend their idle
quota and may borrow up to 100 beyond it. The appliance has one cohort (the pool), so the five
cohorts of six are one of thirty: a queue may borrow from any other, which Kueue's queues may
not (every figure below stays comparable: the demand and the quota per queue are Kueue's).
Run times are the sim backend's step time, one step per job (label
appliance.io/sim-step-seconds). The coordinator is its own process (APPLIANCE_BACKEND=sim);
the workloads are submitted through the gRPC client by `--submitters` processes of `--threads`
threads, each on its share of Kueue's schedule (a submit that falls behind its time goes at
once; the lag is reported).

Reported, as Kueue's runner reports them: the wall time from the first creation to the last
workload finished, and per class the mean time from a job's creation (its created_at) to its
first admission (SCHEDULED), with p50 and p90; Kueue's figures and the lower bound (arrivals
end at 60 s, and the work is 39,600 system-seconds on 600 systems: ~66 s) beside them.
`--scale 0.2` keeps the queues, quotas and intervals and submits a fifth of each set (a quick
run; the bound scales with it). Kueue's numbers live in KUEUE below: update them there when
Kueue republishes them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import multiprocessing
import os
import sqlite3
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

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

# Kueue's published baseline (rangespec.yaml at the commit above), in seconds.
KUEUE = {
    "source": "kubernetes-sigs/kueue@ff69552e test/performance/scheduler/configs/baseline",
    "wall_s": 351.1,
    "mean_admission_s": {"large": 6.7, "medium": 76.8, "small": 215.5},
    # With SchedulingEquivalenceHashing on, Kueue's current default, large averages 16.5 s;
    # the issue compares with 6.7 s (without it), the better of the two.
    "mean_admission_s_large_with_equivalence_hashing": 16.5,
}
GOALS = {"wall_s": 100.0, "mean_admission_s": {"large": 6.7, "medium": 76.8, "small": 215.5}}


@dataclasses.dataclass(frozen=True)
class WorkloadClass:
    name: str
    count: int  # per queue
    interval: float  # seconds between creations
    systems: int
    runtime: float  # seconds
    priority: str


CLASSES = (
    WorkloadClass("small", 350, 0.1, 1, 0.2, "P3"),
    WorkloadClass("medium", 100, 0.5, 5, 0.5, "P2"),
    WorkloadClass("large", 50, 1.2, 20, 1.0, "P1"),
)
COHORTS, QUEUES_PER_COHORT, QUOTA, BORROW = 5, 6, 20, 100
QUEUES = [f"cq-{c}-{q}" for c in range(COHORTS) for q in range(QUEUES_PER_COHORT)]
CLASS_LABEL = "kueue-class"
STEP_LABEL = "appliance.io/sim-step-seconds"


def schedule(scale: float) -> list[tuple[float, str, WorkloadClass]]:
    """Every creation (seconds after the start, queue, class), in time order."""
    events = [
        ((i + 1) * wc.interval, queue, wc)
        for queue in QUEUES
        for wc in CLASSES
        for i in range(max(1, round(wc.count * scale)))
    ]
    return sorted(events, key=lambda e: (e[0], e[1], e[2].name))


def lower_bound(scale: float) -> float:
    """No scheduler finishes before the last arrival nor before the work fits on the pool."""
    events = schedule(scale)
    work = sum(wc.systems * wc.runtime for _, _, wc in events)
    return max(max(t for t, _, _ in events), work / (QUOTA * len(QUEUES)))


def queues_file(path: Path) -> None:
    queues = [{"name": q, "systems": QUOTA, "borrow_systems": BORROW} for q in QUEUES]
    path.write_text(yaml.safe_dump({"queues": queues}))


def _submit(
    address: str, share: list[tuple[float, str, str]], start: float, threads: int, out: Any
) -> None:
    """Submit this process's share of the schedule from `threads` threads, each workload at
    its time after `start` (epoch): like Kueue's generator, creations do not wait for one
    another's answers, so a slow answer does not delay the schedule."""
    from appliance.client import ApplianceClient
    from appliance.client.errors import ApplianceError

    params = yaml.safe_load(EXAMPLE_PARAMS.read_text())
    by_name = {wc.name: wc for wc in CLASSES}
    client = ApplianceClient(address, insecure=True)

    def stream(part: list[tuple[float, str, str]]) -> list[float]:
        lags = []
        for at, queue, name in part:
            wc = by_name[name]
            delay = start + at - time.time()
            if delay > 0:
                time.sleep(delay)  # keeping Kueue's arrival schedule, not synchronising
            lags.append(max(0.0, -delay))
            labels = {CLASS_LABEL: wc.name, STEP_LABEL: str(wc.runtime)}
            try:
                client.submit(
                    params, num_csx=wc.systems, num_steps=1, detach=True,
                    priority=wc.priority, queue=queue, labels=labels,
                )  # fmt: skip
            except ApplianceError as exc:  # counted (the run waits only for the jobs stored)
                lags.append(-1.0)
                print(f"submit failed: {exc}", file=sys.stderr, flush=True)
        return lags

    with ThreadPoolExecutor(threads) as pool:
        lags = [lag for part in pool.map(stream, [share[i::threads] for i in range(threads)])
                for lag in part]  # fmt: skip
    client.close()
    out.put(lags)


def run(
    tree: Path | None, scale: float, submitters: int, threads: int, profile: Path | None = None
) -> dict[str, Any]:
    """One tree's run; `profile`: cProfile the whole coordinator (bench/_profiled_serve.py)."""
    data_dir = fresh_dir("kueue-baseline")
    trace = data_dir / "passes.jsonl"
    systems = QUOTA * len(QUEUES)
    qfile = data_dir / "queues.yaml"
    queues_file(qfile)
    nodes = {
        "APPLIANCE_SYSTEMS": str(systems),
        "APPLIANCE_MEMORYX_NODES": str(systems // 2),
        "APPLIANCE_SWARMX_NODES": str(systems // 4),
    }
    env = {
        **nodes, "APPLIANCE_BACKEND": "sim", "APPLIANCE_QUEUES_FILE": str(qfile),
        "APPLIANCE_SCHEDULER_TRACE": str(trace),
    }  # fmt: skip
    os.environ.update(nodes)  # prepare_store reads the same pool
    prepare_store_with(tree, data_dir, ())
    events = schedule(scale)
    spawn = multiprocessing.get_context("spawn")
    load = os.getloadavg()[0]
    with CoordinatorProcess(data_dir, extra_env=env, tree=tree, profile=profile) as coordinator:
        address = coordinator.wait_address()
        cpu_before = coordinator.thread_cpu()
        out = spawn.Queue()
        start = time.time() + 1.0  # every submitter connected by then
        shares = [
            [(t, q, wc.name) for t, q, wc in events[i::submitters]] for i in range(submitters)
        ]
        procs = [
            spawn.Process(target=_submit, args=(address, share, start, threads, out))
            for share in shares
        ]
        for proc in procs:
            proc.start()
        lags = [lag for _ in procs for lag in out.get(timeout=3600)]
        for proc in procs:
            proc.join(60)
        failed = sum(1 for lag in lags if lag < 0)
        lags = [lag for lag in lags if lag >= 0]
        db = sqlite3.connect(f"file:{data_dir / 'appliance.db'}?mode=ro", uri=True)
        done_sql = "SELECT count(*) FROM jobs WHERE phase = 'SUCCEEDED'"
        deadline = time.monotonic() + 600
        while (
            time.monotonic() < deadline
            and db.execute(done_sql).fetchone()[0] < len(events) - failed
        ):
            time.sleep(0.25)  # polling the store from outside, not synchronising anything
        load_end = os.getloadavg()[0]
        cpu = cpu_ms_per_job(cpu_before, coordinator.thread_cpu(), len(events) - failed)
        rows = db.execute(
            "SELECT j.id, json_extract(j.labels, '$.\"kueue-class\"'), j.created_at, j.phase,"
            " (SELECT min(e.time) FROM job_events e WHERE e.job_id = j.id"
            "  AND e.to_phase = 'SCHEDULED'),"
            " (SELECT max(e.time) FROM job_events e WHERE e.job_id = j.id"
            "  AND e.to_phase = 'SUCCEEDED'),"
            " (SELECT count(*) FROM job_events e WHERE e.job_id = j.id"
            "  AND e.to_phase = 'SCHEDULED'),"
            " (SELECT max(e.time) FROM job_events e WHERE e.job_id = j.id"
            "  AND e.to_phase = 'RUNNING')"
            " FROM jobs j"
        ).fetchall()
        db.close()
    passes = [json.loads(line) for line in trace.read_text().splitlines()]
    result = _result(tree, scale, rows, passes, lags, start, (load, load_end))
    return {**result, "submits_failed": failed, "coordinator_cpu_ms_per_workload": cpu}


def _result(
    tree: Path | None,
    scale: float,
    rows: list[tuple[Any, ...]],
    passes: list[dict[str, Any]],
    lags: list[float],
    start: float,
    loads: tuple[float, float],
) -> dict[str, Any]:
    waits: dict[str, list[float]] = {wc.name: [] for wc in CLASSES}
    # How long a job admitted once held its systems beyond its run time, in two parts: from
    # its admission to RUNNING (its replicas started and registered), and from RUNNING to
    # its end written (its step, then its exit reported). kueue_replay shows the wall time
    # follows this overhead: each queue's large jobs run one after another.
    starting: dict[str, list[float]] = {wc.name: [] for wc in CLASSES}
    ending: dict[str, list[float]] = {wc.name: [] for wc in CLASSES}
    runtimes = {wc.name: wc.runtime for wc in CLASSES}
    ends = []
    preempted = 0
    for _, name, created, _, scheduled, succeeded, admissions, running in rows:
        if scheduled is not None and name in waits:
            waits[name].append(scheduled - created)
        if succeeded is not None:
            ends.append(succeeded)
        if admissions == 1 and name in waits and None not in (scheduled, running, succeeded):
            starting[name].append(running - scheduled)
            ending[name].append(succeeded - running - runtimes[name])
        preempted += max(0, admissions - 1)
    first = min(created for _, _, created, *_ in rows)
    wall = max(ends) - first if len(ends) == len(rows) else None
    busy = [p["seconds"] for p in passes]
    return {
        "code": "this checkout" if tree is None else tree.name.removeprefix("landed-"),
        "scale": scale,
        "workloads": len(rows),
        "finished": len(ends),
        "wall_s": round(wall, 1) if wall is not None else None,
        "lower_bound_s": round(lower_bound(scale), 1),
        "admission_s": {
            name: {
                "n": len(w),
                "mean": round(sum(w) / len(w), 2) if w else None,
                "p50": round(percentile(w, 50), 2) if w else None,
                "p90": round(percentile(w, 90), 2) if w else None,
            }
            for name, w in waits.items()
        },
        "held_beyond_run_time_s": {
            name: {
                part: {
                    "mean": round(sum(w) / len(w), 3) if w else None,
                    "p90": round(percentile(w, 90), 3) if w else None,
                }
                for part, w in (("to_running", starting[name]), ("to_end", ending[name]))
            }
            for name in waits
        },
        "requeued_by_preemption": preempted,
        "passes": len(passes),
        "pass_ms_p50": round(1000 * percentile(busy, 50), 2) if busy else None,
        "pass_ms_p99": round(1000 * percentile(busy, 99), 2) if busy else None,
        "submit_lag_s_p99": round(percentile(lags, 99), 3) if lags else None,
        "started_at": round(start, 3),
        "load_average_1m": {"start": round(loads[0], 2), "end": round(loads[1], 2)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="of each set's count")
    parser.add_argument("--trees", default="HEAD", help="commits to run, comma-separated")
    parser.add_argument("--submitters", type=int, default=4, help="submitting processes")
    parser.add_argument("--threads", type=int, default=16, help="per submitting process")
    parser.add_argument("--profile", type=Path, help="cProfile this checkout's coordinator")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    if not 0 < args.scale <= 1 or not math.isfinite(args.scale):
        parser.error("--scale must be in (0, 1]")
    WORK.mkdir(parents=True, exist_ok=True)
    runs = []
    for commit in args.trees.split(","):
        tree = code_tree(commit)
        profile = args.profile if tree is None else None
        runs.append(run(tree, args.scale, args.submitters, args.threads, profile))
        print(json.dumps(runs[-1]), flush=True)
    emit("kueue_baseline", {"kueue": KUEUE, "goals": GOALS, "runs": runs})


if __name__ == "__main__":
    main()
