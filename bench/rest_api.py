"""REST API under load: POST /api/v1/jobs throughput with 50 concurrent clients (goal >= 500
jobs/s) and the p99 of GET /api/v1/jobs/{id} measured during that load (goal <= 50 ms).

Every CS-2 system is put in maintenance before the coordinator starts, so the jobs stay QUEUED
(the scheduler still runs its passes). Each submit client has its own httpx.AsyncClient (its
own keep-alive connection) and submits back to back until the shared count is reached. Only
jobs persisted QUEUED count. Meanwhile one probe process (`--probes`) GETs one job every 5 ms
(`--probe-interval`) on its own keep-alive connection, like a user's `csctl` beside the load.
The probe is a process of its own: a probe on the load generator's event loop, busy with 50
clients, measured that loop's delay in reading the answer (p99 ~120 ms where a probe process
saw ~30 ms). The run is repeated (`--runs`, each on a fresh store and coordinator); the
median run by GET p99 is recorded with every run listed beside it, and the goals count as met
only if every run meets them. `--compare COMMIT` makes as many runs with that commit's code
(`git archive`), each right after one of this code's, and records them beside (a before/after).

    python -m bench.rest_api [--jobs 5000] [--clients 50] [--probes 1] [--probe-interval 0.005]
        [--runs 3] [--compare REV] [--no-record] [--profile OUT.prof]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import multiprocessing.synchronize
import os
import re
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.common import (
    EXAMPLE_PARAMS,
    SYSTEMS,
    CoordinatorProcess,
    code_tree,
    emit,
    fresh_dir,
    median_run,
    prepare_store,
    summarize_ms,
)

GOAL_JOBS_PER_S = 500.0
GOAL_GET_P99_MS = 50.0


class RestCoordinator(CoordinatorProcess):
    """CoordinatorProcess that also keeps the HTTP address of the first stdout line."""

    http_url = ""

    def wait_address(self, timeout: float = 60.0) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        os.set_blocking(self.proc.stdout.fileno(), True)
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline().decode()
            if not line:
                raise RuntimeError(f"coordinator exited early; see {self.log_path}")
            found = re.match(r"appliance (\S+) \(gRPC\), (http://\S+) \(HTTP\)", line)
            if found:
                self.address, self.http_url = found.group(1), found.group(2)
                return self.address
        raise TimeoutError("coordinator did not print its address")


def probe(
    url: str, interval: float, stop: multiprocessing.synchronize.Event, results: Any
) -> None:
    """GET `url` every `interval` seconds (or as soon as the last answer came, if later) on
    one keep-alive connection until `stop`; put the latencies (seconds) and the non-200
    answers in `results`."""
    latency: list[float] = []
    errors: dict[str, int] = {}
    with httpx.Client() as client:
        while not stop.wait(max(0.0, interval - (latency[-1] if latency else 0.0))):
            t0 = time.perf_counter()
            response = client.get(url, timeout=30)
            if response.status_code != 200:
                key = f"GET {response.status_code}"
                errors[key] = errors.get(key, 0) + 1
                continue
            latency.append(time.perf_counter() - t0)
    results.put((latency, errors))


def server_side_latency(metrics: str, method: str, route: str) -> dict[str, float]:
    """How many of the route's requests the coordinator answered within each histogram bucket
    (from receiving the request to starting the response), from its /metrics."""
    cumulative: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name.endswith("_bucket")
                and labels.get("method") == method
                and labels.get("route") == route
                and labels.get("status") == "200"
            ):
                cumulative[f"le_{labels['le']}_s"] = sample.value
    return cumulative


async def load(base_url: str, args: argparse.Namespace) -> dict[str, Any]:
    jobs, clients = args.jobs, args.clients
    body = {
        "params": EXAMPLE_PARAMS.read_text(),
        "num_csx": 1,
        "num_steps": 100,
        "mode": "train",
        "labels": {"bench": "rest"},
    }
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    submitters = [httpx.AsyncClient(base_url=base_url, limits=limits) for _ in range(clients)]
    await asyncio.gather(*(c.get("/healthz") for c in submitters))  # warm-up: connect
    probed = await submitters[0].post("/api/v1/jobs", json=body)
    probed.raise_for_status()
    probe_url = f"{base_url}/api/v1/jobs/{probed.json()['id']}"

    remaining = jobs
    submit_latency: list[float] = []
    get_latency: list[float] = []
    errors: dict[str, int] = {}
    deadline = time.monotonic() + args.time_limit

    async def submitter(client: httpx.AsyncClient) -> None:
        nonlocal remaining
        while remaining > 0 and time.monotonic() < deadline:
            remaining -= 1
            t0 = time.perf_counter()
            response = await client.post("/api/v1/jobs", json=body, timeout=30)
            if response.status_code != 201:
                errors[str(response.status_code)] = errors.get(str(response.status_code), 0) + 1
                continue
            submit_latency.append(time.perf_counter() - t0)

    spawn = multiprocessing.get_context("spawn")
    stop, results = spawn.Event(), spawn.Queue()
    probing = [
        spawn.Process(target=probe, args=(probe_url, args.probe_interval, stop, results))
        for _ in range(args.probes)
    ]
    for process in probing:
        process.start()
    start = time.perf_counter()
    await asyncio.gather(*(submitter(c) for c in submitters))
    elapsed = time.perf_counter() - start
    stop.set()
    for _ in probing:
        latency, probe_errors = results.get(timeout=60)
        get_latency += latency
        for key, count in probe_errors.items():
            errors[key] = errors.get(key, 0) + count
    for process in probing:
        process.join()
    scraped = (await submitters[0].get("/metrics")).text
    await asyncio.gather(*(c.aclose() for c in submitters))
    return {
        "elapsed_s": round(elapsed, 3),
        "acked": len(submit_latency),
        "errors": errors,
        "acked_per_s": round(len(submit_latency) / elapsed, 1),
        "submit_latency": summarize_ms(submit_latency) if submit_latency else {},
        "get_latency_under_load": summarize_ms(get_latency) if get_latency else {},
        "get_server_side": server_side_latency(scraped, "GET", "/api/v1/jobs/{job_id}"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument(
        "--probes", type=int, default=1, help="processes GETting one job meanwhile"
    )
    parser.add_argument(
        "--probe-interval", type=float, default=0.005, help="seconds between a probe's GETs"
    )
    parser.add_argument("--time-limit", type=float, default=90.0)
    parser.add_argument(
        "--runs", type=int, default=3, help="independent runs; the median one is recorded"
    )
    parser.add_argument("--compare", help="a commit to run as often, interleaved")
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument("--profile", type=Path, help="cProfile the coordinator into this file")
    args = parser.parse_args()

    tree = code_tree(args.compare) if args.compare else None
    runs: list[dict[str, Any]] = []
    compared: list[dict[str, Any]] = []
    for _ in range(args.runs):
        runs.append(run_once(args))
        if tree is not None:
            compared.append(run_once(args, tree))
    median = median_run(runs, "get_p99_ms")
    summary = ("jobs_per_s", "get_p99_ms", "meets_goals", "elapsed_s")
    beside: dict[str, Any] = {}
    if compared:
        beside["compared"] = {
            "commit": args.compare,
            "runs": [{k: r[k] for k in summary} for r in compared],
        }
    emit(
        "rest_api",
        {
            **median,
            "judged_on": f"the median of {len(runs)} runs by GET p99 (each a fresh store "
            "and coordinator); every run must meet both goals",
            "meets_goals": all(r["meets_goals"] for r in runs),
            "runs": [{k: r[k] for k in summary} for r in runs],
            **beside,
        },
        sys.argv + (["--no-record"] if args.profile is not None else []),
    )


def run_once(args: argparse.Namespace, tree: Path | None = None) -> dict[str, Any]:
    """One load run against a fresh store and coordinator (of `tree`'s code, if given); its
    result, not yet recorded."""
    data_dir = fresh_dir("rest_api")
    prepare_store(data_dir, maintenance=SYSTEMS)
    coordinator = RestCoordinator(data_dir, profile=args.profile, tree=tree)
    try:
        coordinator.wait_address()
        cpu_before = coordinator.thread_cpu()
        own_before = time.process_time()
        run = asyncio.run(load(coordinator.http_url, args))
        own_cpu = time.process_time() - own_before
        cpu_after = coordinator.thread_cpu()
    finally:
        coordinator.stop()
    cpu = {k: round(v - cpu_before.get(k, 0.0), 2) for k, v in cpu_after.items()}
    db = sqlite3.connect(data_dir / "appliance.db")
    try:
        queued = db.execute(
            "SELECT count(*) FROM jobs WHERE phase = 'QUEUED' "
            'AND labels LIKE \'%"bench": "rest"%\''
        ).fetchone()[0]
    finally:
        db.close()
    rate = (queued - 1) / run["elapsed_s"]  # the probe job was submitted before the clock
    get_p99 = run["get_latency_under_load"].get("p99_ms", float("inf"))
    result = {
        "clients": args.clients,
        "probes": args.probes,
        "probe_interval_s": args.probe_interval,
        "jobs_requested": args.jobs,
        "persisted_queued": queued,
        "jobs_per_s": round(rate, 1),
        "goal_jobs_per_s": GOAL_JOBS_PER_S,
        "get_p99_ms": get_p99,
        "goal_get_p99_ms": GOAL_GET_P99_MS,
        "meets_goals": rate >= GOAL_JOBS_PER_S and get_p99 <= GOAL_GET_P99_MS,
        "profiled": args.profile is not None,
        "coordinator_cpu_s": {k: v for k, v in cpu.items() if v > 0},
        "load_generator_cpu_s": round(own_cpu, 2),
        **run,
    }
    shown = {k: result[k] for k in ("jobs_per_s", "get_p99_ms")}
    print("compared" if tree else "current", json.dumps(shown), file=sys.stderr)
    return result


if __name__ == "__main__":
    main()
