"""Elastic jobs (#37): one trace replayed by the simulator with every job of a fixed size, and
again with each job elastic over its range, side by side.

    python -m bench.elastic_gain [--jobs 300] [--systems 8] [--seed 37] [--no-record]

The trace is backfill_gain's (`sacct --parsable2`: `--jobs` jobs of 1-4 systems submitted
within two hours, lognormal run times with a median of 25 min), with its time limits dropped in
both runs (an elastic job that runs smaller runs longer; a limit would end it). The elastic run
gives each job of N > 1 systems the range 1-N, and a job's run time on n of its N systems is
its run time times N/n (the simulated backend's step time scales so: the same work, as weight
streaming keeps the global batch). Reported: utilisation, makespan, wait p50/p90, and how many
jobs grew back (reason `Growing`) in the elastic run.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import Any

from appliance.config import Settings
from appliance.simulation import report
from appliance.simulation.runner import simulate
from appliance.simulation.workload import read_trace, to_queues
from bench.backfill_gain import trace
from bench.common import WORK, emit


def replay(path: Path, systems: int, elastic: bool) -> dict[str, Any]:
    workload, _ = read_trace(path)
    workload, _ = to_queues(workload, {"default"})
    workload = [
        dataclasses.replace(
            job, time_limit=None, num_csx_min=1 if elastic and job.num_csx > 1 else 0
        )
        for job in workload
    ]
    settings = Settings(
        systems=systems, memoryx_nodes=max(1, systems // 2), swarmx_nodes=max(1, systems // 4)
    )
    started = time.perf_counter()
    outcome = simulate(workload, settings, sample_every=300)
    summary = report.summarize(outcome)
    waits = summary["wait_seconds"]["all"]
    return {
        "utilisation": summary["utilisation"],
        "makespan_hours": summary["makespan_hours"],
        "wait_minutes_p50": round(waits["p50"] / 60, 1),
        "wait_minutes_p90": round(waits["p90"] / 60, 1),
        "phases": summary["phases"],
        "elastic_jobs": sum(1 for job in workload if job.num_csx_min),
        # Requeues: an elastic job's to grow back (no failures or preemptions in this trace).
        "requeues": sum(job.restarts for _, job in outcome.jobs),
        "wall_seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--systems", type=int, default=8)
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    path = WORK / f"elastic-{args.jobs}-{args.seed}.sacct"
    path.write_text(trace(args.jobs, args.seed))
    fixed = replay(path, args.systems, elastic=False)
    print("fixed", fixed, flush=True)
    elastic = replay(path, args.systems, elastic=True)
    print("elastic", elastic, flush=True)
    result = {
        "trace": f"{args.jobs} jobs of 1-4 systems on {args.systems} systems (seed {args.seed})",
        "fixed_size": fixed,
        "elastic_1_to_n": elastic,
        "utilisation_gain": round(elastic["utilisation"] - fixed["utilisation"], 4),
    }
    emit("elastic_gain", result)


if __name__ == "__main__":
    main()
