"""The appliance against a local Slurm in the same run (#18): submit >= 1.5x `sbatch`, bulk
cancel (one command) >= 1.5x `scancel -u`.

Each run brings up a fresh local Slurm (bench/slurm/up.sh: munged, slurmctld and 4 `slurmd -N`
on 127.0.0.1 with the settings of Slurm's high-throughput guide; see bench/slurm_cluster.py)
and a fresh coordinator (every CS-2 in maintenance, so jobs stay QUEUED), and puts the same
work through each in turn, never both at once:

1. Sequential submit: `--sequential-jobs` sbatch one after another / SubmitJob from one gRPC
   client. Then these are cancelled, untimed.
2. Concurrent submit: `--jobs` sbatch, `--clients` at a time (xargs -P) / `--clients` gRPC
   clients (bench.submit_throughput.load). The rate counts acknowledged jobs.
3. Cancel every pending job (the `--jobs` of step 2): `scancel -u $USER`, timed until squeue
   shows none pending / `--clients` gRPC clients, one CancelJob per job
   (bench.bulk_cancel.cancel_all), timed from opening the channels, so listing the jobs counts
   as scancel's own listing does.
4. The appliance's counterpart of `scancel -u`: `--csctl-jobs` fresh queued jobs (submitted
   untimed), then ONE `csctl cancel jobs --mine` (CancelJobs, a server-side selection), timed
   from starting the csctl process until it exits, all of them cancelled by then. csctl runs
   as the jobs' owner (USER=LOGNAME=bench, the name the load submits under), as scancel runs
   as root, theirs.

Judged on the medians of the runs, ours / Slurm: submit (step 2) and bulk cancel (step 4
against `scancel -u`); the sequential submit and the 50-client per-job cancel (step 3) are
reported beside them. The load average is recorded before each run.

    python -m bench.versus_slurm [--jobs 10000] [--sequential-jobs 1000] [--clients 50]
        [--runs 3] [--slurm-pending drain|hold] [--csctl-jobs 10000] [--commit REF] [--no-record]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc

from appliance._proto.v1 import cluster_pb2_grpc
from bench.bulk_cancel import active_job_ids, cancel_all
from bench.common import (
    SYSTEMS,
    CoordinatorProcess,
    commit_tree,
    emit,
    fresh_dir,
    phase_counts,
    prepare_store,
)
from bench.slurm_cluster import PENDING_MODES, LocalSlurm
from bench.submit_throughput import load as submit_load

GOAL_RATIO = 1.5
OWNER = "bench"  # the user bench.submit_throughput.load submits as
CSCTL = Path(sys.executable).parent / "csctl"


def slurm_run(args: argparse.Namespace) -> dict[str, Any]:
    slurm = LocalSlurm(nodes=args.slurm_nodes, pending=args.slurm_pending)
    slurm.up()
    try:
        sequential = slurm.submit(args.sequential_jobs, 1)
        slurm.cancel_mine()
        concurrent = slurm.submit(args.jobs, args.clients)
        reason = slurm.pending_reason()
        cancel = slurm.cancel_mine(args.time_limit)
    finally:
        slurm.down()
    return {
        "sbatch_sequential": sequential,
        "sbatch_concurrent": concurrent,
        "pending_reason": reason,
        "scancel": cancel,
    }


def ours_run(args: argparse.Namespace) -> dict[str, Any]:
    data_dir = fresh_dir("versus-slurm")
    prepare_store(data_dir, maintenance=SYSTEMS)
    coordinator = CoordinatorProcess(data_dir, profile=args.profile, tree=args.tree)
    try:
        address = coordinator.wait_address()
        sequential = asyncio.run(submit_load(address, args.sequential_jobs, 1, args.time_limit))
        asyncio.run(cancel_all(address, args.clients, args.time_limit))
        concurrent = asyncio.run(submit_load(address, args.jobs, args.clients, args.time_limit))
        start = time.perf_counter()
        cancel = asyncio.run(cancel_all(address, args.clients, args.time_limit))
        cancel_elapsed = time.perf_counter() - start
        cli = csctl_cancel_mine(address, args) if args.csctl_jobs else {}
    finally:
        coordinator.stop()
    phases = phase_counts(data_dir)
    return {
        "submit_sequential": _without_latency(sequential),
        "submit_concurrent": _without_latency(concurrent),
        "submit_p99_ms": concurrent["latency"].get("p99_ms"),
        "cancel": {
            "listed": cancel["listed"],
            "cancelled": cancel["cancel_acked"],
            "errors": cancel["errors"],
            "elapsed_s": round(cancel_elapsed, 3),
            "cancelled_per_s": round(cancel["cancel_acked"] / cancel_elapsed, 1),
            "cancel_calls_only_s": cancel["cancel_elapsed_s"],
            "p99_ms": cancel["latency"].get("p99_ms"),
        },
        "csctl_cancel": cli,
        "phases_after": phases,
    }


def csctl_cancel_mine(address: str, args: argparse.Namespace) -> dict[str, Any]:
    """Queue `--csctl-jobs` jobs (untimed), then time one `csctl cancel jobs --mine`, run as
    their owner; the count is the one csctl prints, checked against what is left active."""
    asyncio.run(submit_load(address, args.csctl_jobs, args.clients, args.time_limit))
    queued = len(asyncio.run(_listed(address)))
    env = {**os.environ, "CSCTL_CONFIG": os.devnull, "USER": OWNER, "LOGNAME": OWNER}
    if args.tree is not None:  # csctl of that commit too (a console script: no cwd on its path)
        env["PYTHONPATH"] = str(args.tree)
    start = time.perf_counter()
    done = subprocess.run(
        [str(CSCTL), "--server", address, "cancel", "jobs", "--mine"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    elapsed = time.perf_counter() - start
    printed = done.stdout.split()
    cancelled = int(printed[1]) if printed[:1] == ["cancelled"] else 0
    return {
        "jobs": queued,
        "command": f"csctl cancel jobs --mine (as {OWNER})",
        "elapsed_s": round(elapsed, 3),
        "cancelled": cancelled,
        "left_active": len(asyncio.run(_listed(address))),
        "exit_status": done.returncode,
        "stderr": done.stderr.strip()[:300],
        "cancelled_per_s": round(cancelled / elapsed, 1),
    }


async def _listed(address: str) -> list[str]:
    async with grpc.aio.insecure_channel(address) as channel:
        return await active_job_ids(cluster_pb2_grpc.ClusterServiceStub(channel))


def _without_latency(load: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in load.items() if k != "latency"}


def run_once(args: argparse.Namespace) -> dict[str, Any]:
    load_before = [round(x, 2) for x in os.getloadavg()]
    slurm = slurm_run(args)
    ours = ours_run(args)
    rates = {
        "sbatch_sequential": slurm["sbatch_sequential"]["acked_per_s"],
        "sbatch_concurrent": slurm["sbatch_concurrent"]["acked_per_s"],
        "scancel": slurm["scancel"]["cancelled_per_s"],
        "ours_submit_sequential": ours["submit_sequential"]["acked_per_s"],
        "ours_submit_concurrent": ours["submit_concurrent"]["acked_per_s"],
        "ours_cancel_50_clients": ours["cancel"]["cancelled_per_s"],
        "ours_csctl_cancel_mine": ours["csctl_cancel"].get("cancelled_per_s"),
    }
    return {"load_average_before": load_before, "rates_per_s": rates, "slurm": slurm,
            "ours": ours}  # fmt: skip


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [run["rates_per_s"][key] for run in runs if run["rates_per_s"][key] is not None]
    return round(statistics.median(values), 1) if values else None


def _ratio(ours: float | None, theirs: float | None) -> float | None:
    return round(ours / theirs, 2) if ours is not None and theirs else None


# The comparisons: (ours, Slurm's) keys of rates_per_s; the first two are the goal's.
COMPARED = {
    "submit_concurrent": ("ours_submit_concurrent", "sbatch_concurrent"),
    "cancel": ("ours_csctl_cancel_mine", "scancel"),
    "submit_sequential": ("ours_submit_sequential", "sbatch_sequential"),
    "cancel_50_clients": ("ours_cancel_50_clients", "scancel"),
}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    medians = {key: _median(runs, key) for key in runs[0]["rates_per_s"]}
    ratios = {name: _ratio(medians[a], medians[b]) for name, (a, b) in COMPARED.items()}
    per_run = [
        {
            name: _ratio(run["rates_per_s"][a], run["rates_per_s"][b])
            for name, (a, b) in COMPARED.items()
        }
        for run in runs
    ]
    submit_met = (ratios["submit_concurrent"] or 0) >= GOAL_RATIO
    cancel_met = (ratios["cancel"] or 0) >= GOAL_RATIO
    return {
        "median_rates_per_s": medians,
        "ratios_ours_over_slurm": ratios,
        "ratios_per_run": per_run,
        "submit_met": submit_met,
        "cancel_met": cancel_met,
        "met": submit_met and cancel_met,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--sequential-jobs", type=int, default=1_000)
    parser.add_argument("--csctl-jobs", type=int, default=10_000, help="0: skip csctl")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--slurm-nodes", type=int, default=4)
    parser.add_argument("--slurm-pending", choices=PENDING_MODES, default="drain")
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--no-record", action="store_true")
    parser.add_argument("--profile", type=Path, help="cProfile the coordinator into this file")
    parser.add_argument(
        "--commit", help="run the coordinator and csctl of this commit, not this checkout"
    )
    args = parser.parse_args()
    code, args.tree = "this checkout", None
    if args.commit:
        if args.profile:
            parser.error("--profile runs this checkout's code; leave out --commit")
        commit, args.tree = commit_tree(args.commit)
        code = f"commit {commit} (git archive)"

    probe = LocalSlurm(nodes=args.slurm_nodes, pending=args.slurm_pending)
    runs = []
    for index in range(args.runs):
        runs.append(run_once(args))
        print(f"run {index + 1}: {runs[-1]['rates_per_s']}", file=sys.stderr)
    summary = summarize(runs)
    emit(
        "versus_slurm",
        {
            "goal": f"submit >= {GOAL_RATIO}x sbatch and bulk cancel (`csctl cancel jobs "
            f"--mine`) >= {GOAL_RATIO}x `scancel -u`, a local Slurm measured in the same run",
            "jobs": args.jobs,
            "sequential_jobs": args.sequential_jobs,
            "csctl_jobs": args.csctl_jobs,
            "clients": args.clients,
            "coordinator_code": code,
            "slurm_version": probe.version(),
            "slurm_nodes": f"{args.slurm_nodes} slurmd (slurmd -N nodeK, a port each), 127.0.0.1",
            "slurm_pending": args.slurm_pending,
            "slurm_settings": _settings(probe),
            **summary,
            "judged_on": f"medians of {len(runs)} runs (each a fresh Slurm and coordinator)",
            "profiled": args.profile is not None,
            "runs": runs,
        },
    )
    ratios = summary["ratios_ours_over_slurm"]
    for name, met in (
        ("submit_concurrent", summary["submit_met"]),
        ("cancel", summary["cancel_met"]),
    ):
        verdict = "met" if met else "missed"
        print(f"{name}: ours/Slurm {ratios[name]}x (goal >= {GOAL_RATIO}x): {verdict}")


def _settings(slurm: LocalSlurm) -> dict[str, str]:
    if not (slurm.dir / "slurm.conf").exists():
        return {}
    return slurm.settings()


if __name__ == "__main__":
    main()
