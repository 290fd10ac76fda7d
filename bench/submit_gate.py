"""A gate against the next submit regression, cheap enough for every CI run (~30 s).

Absolute rates move between machines and with what else runs, so the gate judges a cost, not a
rate: the coordinator's CPU time per submitted job (every thread, read from /proc), 50 gRPC
clients submitting, over the CPU time of a fixed piece of pure-Python work (parsing the example
params) measured by this process between the rounds: how fast this machine runs Python now.
Measured on a 2-core machine (bench/README.md): 1.7 quiet and 2.1 with two CPU-bound
processes beside it once #40 was fixed, against 3.1 and 4.0 at 50ecc7d, whose submits ran at
640 jobs/s instead of 1,150. Throughput and GetVersion-relative ratios were tried first and
moved too much with load to make a gate.

Exits 1, saying so, when the median of the rounds is above `--ceiling`.

    python -m bench.submit_gate [--ceiling 2.6] [--rounds 5] [--trees 50ecc7d,HEAD]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import psutil
import yaml

from bench.common import (
    EXAMPLE_PARAMS,
    SYSTEMS,
    CoordinatorProcess,
    code_tree,
    fresh_dir,
    prepare_store_with,
)
from bench.submit_throughput import load as submit_load

CLIENTS = 50
SUBMITS = 1500
# 1,000 parses (~1.2 s): with 200 (0.25 s) the unit moved 20% between two trees of one run
# (1.21 and 1.48 ms, #37) while their CPU a submit moved 4%.
CALIBRATION_LOOPS = 1000
CEILING = 2.6


def calibration_ms() -> float:
    """CPU milliseconds of a fixed piece of pure-Python work in this process."""
    text = EXAMPLE_PARAMS.read_text()
    before = time.process_time()
    for _ in range(CALIBRATION_LOOPS):
        yaml.safe_load(text)
    return (time.process_time() - before) * 1000 / CALIBRATION_LOOPS


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, every thread) the process has used so far."""
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def measure(tree: Path | None, rounds: int) -> tuple[float, float, float]:
    """(submits/s, the coordinator's CPU ms a submit, calibration ms) against the coordinator
    of `tree` (None: this checkout), each the median of its rounds."""
    data_dir = fresh_dir("submit-gate")
    prepare_store_with(tree, data_dir, SYSTEMS)
    rates: list[float] = []
    submit_ms: list[float] = []
    calibrations: list[float] = []
    with CoordinatorProcess(data_dir, tree=tree) as coordinator:
        coordinator.wait_address()
        for _ in range(rounds):
            calibrations.append(calibration_ms())
            before = cpu_seconds(coordinator.pid)
            run = asyncio.run(submit_load(coordinator.address, SUBMITS, CLIENTS, 120.0))
            submit_ms.append((cpu_seconds(coordinator.pid) - before) * 1000 / SUBMITS)
            if run["errors"]:
                raise SystemExit(f"submit gate: submits failed: {run['errors']}")
            rates.append(run["acked_per_s"])
    return (
        statistics.median(rates),
        statistics.median(submit_ms),
        statistics.median(calibrations),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ceiling", type=float, default=CEILING)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trees", default="HEAD", help="commits, comma-separated")
    args = parser.parse_args()
    failed = False
    for commit in args.trees.split(","):
        rate, submit_ms, unit_ms = measure(code_tree(commit), args.rounds)
        cost = submit_ms / unit_ms
        verdict = "ok" if cost <= args.ceiling else "ABOVE THE CEILING"
        failed |= cost > args.ceiling
        print(
            f"submit gate ({commit}): {rate:.0f} submits/s; the coordinator's CPU a submit "
            f"{submit_ms:.3f} ms = {cost:.2f} units of {unit_ms:.3f} ms "
            f"(ceiling {args.ceiling:.2f}): {verdict}",
            flush=True,
        )
    if failed:
        print("submit gate: a submit costs more than it did; profile it with "
              "python -m bench.submit_throughput --profile FILE", file=sys.stderr)  # fmt: skip
        sys.exit(1)


if __name__ == "__main__":
    main()
