"""Backfill by time limits (#37): one Slurm trace replayed by `appliance simulate` with its
jobs' time limits ignored and used, side by side.

    python -m bench.backfill_gain [--jobs 300] [--systems 8] [--seed 37] [--no-record]

The trace is generated here as `sacct --parsable2` writes one (JobID|...|Elapsed|NNodes|
Timelimit): `--jobs` jobs of 1-4 systems each, all submitted within two hours (a backlog that
waits), lognormal run times (median 25 min), and the limits their users asked for: the run time
times 1.1-2.5, rounded up to 5 minutes, as Slurm users over-ask; one job in twenty asks for
none (`Partition_Limit`). It is read as `appliance simulate --trace` reads it, then run twice
on the same virtual cluster (`--systems`, MemoryX and SwarmX as `--systems` gives them):
once with every limit dropped (backfill cannot prove a job would not delay the head: only the
head's hold stands) and once as exported. Reported: utilisation, makespan, and wait p50/p90.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import math
import random
import time
from pathlib import Path
from typing import Any

from appliance.config import Settings
from appliance.simulation import report
from appliance.simulation.runner import simulate
from appliance.simulation.workload import read_trace, to_queues
from bench.common import WORK, emit

HEADER = "JobID|JobName|Partition|QOS|User|State|Submit|Start|End|Elapsed|NNodes|Timelimit\n"
START = dt.datetime(2026, 5, 1, 8, 0, tzinfo=dt.UTC)


def clock(seconds: float) -> str:
    """Seconds as sacct writes a duration: [D-]HH:MM:SS."""
    days, rest = divmod(int(seconds), 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def trace(jobs: int, seed: int) -> str:
    """A sacct export of `jobs` jobs (Start and End are what the site saw, not replayed)."""
    rng = random.Random(seed)
    rows = []
    for n in range(jobs):
        submit = START + dt.timedelta(seconds=rng.uniform(0, 7200))
        elapsed = max(60.0, 1500 * math.exp(rng.gauss(0.0, 0.8)))
        asked = math.ceil(elapsed * rng.uniform(1.1, 2.5) / 300) * 300
        limit = "Partition_Limit" if rng.random() < 0.05 else clock(asked)
        end = submit + dt.timedelta(seconds=elapsed)
        rows.append(
            f"{1000 + n}|train|batch|normal|user{rng.randrange(12):02d}|COMPLETED|"
            f"{submit:%Y-%m-%dT%H:%M:%S}|{submit:%Y-%m-%dT%H:%M:%S}|{end:%Y-%m-%dT%H:%M:%S}|"
            f"{clock(elapsed)}|{rng.randint(1, 4)}|{limit}\n"
        )
    return HEADER + "".join(rows)


def replay(path: Path, systems: int, limits: bool) -> dict[str, Any]:
    workload, _ = read_trace(path)
    workload, _ = to_queues(workload, {"default"})
    if not limits:
        workload = [dataclasses.replace(job, time_limit=None) for job in workload]
    settings = Settings(
        systems=systems, memoryx_nodes=max(1, systems // 2), swarmx_nodes=max(1, systems // 4)
    )
    started = time.perf_counter()
    summary = report.summarize(simulate(workload, settings, sample_every=300))
    waits = summary["wait_seconds"]["all"]
    return {
        "utilisation": summary["utilisation"],
        "makespan_hours": summary["makespan_hours"],
        "wait_minutes_p50": round(waits["p50"] / 60, 1),
        "wait_minutes_p90": round(waits["p90"] / 60, 1),
        "phases": summary["phases"],
        "with_time_limit": sum(1 for job in workload if job.time_limit is not None),
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
    path = WORK / f"backfill-{args.jobs}-{args.seed}.sacct"
    path.write_text(trace(args.jobs, args.seed))
    ignored = replay(path, args.systems, limits=False)
    print("limits ignored", ignored, flush=True)
    used = replay(path, args.systems, limits=True)
    print("limits used", used, flush=True)
    result = {
        "trace": f"{args.jobs} jobs of 1-4 systems on {args.systems} systems (seed {args.seed})",
        "time_limits_ignored": ignored,
        "time_limits_used": used,
        "utilisation_gain": round(used["utilisation"] - ignored["utilisation"], 4),
    }
    emit("backfill_gain", result)


if __name__ == "__main__":
    main()
