"""A cold `csctl get jobs` (#19: csctl stays quick, ~0.3 s): a new Python process per run,
the way a user types it, against `appliance serve` holding `--jobs` queued jobs, timed from
starting the process until it exits; and the import of csctl alone (`python -X importtime -c
"import csctl.cli"`, its cumulative microseconds for csctl.cli).

With `--compare REV`, the same runs with REV's csctl (its code unpacked by `git archive`)
alternate with this checkout's, against the same coordinator, so that the load of the machine
falls on both alike. Both run as `python -P -c "...main()"` (the console script costs the
same to both, and is left out).

    python -m bench.csctl_cold [--runs 20] [--jobs 50] [--compare REV] [--no-record]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from appliance.client import ApplianceClient
from bench.common import (
    EXAMPLE_PARAMS,
    SYSTEMS,
    CoordinatorProcess,
    commit_tree,
    emit,
    fresh_dir,
    prepare_store,
)

_MAIN = "import sys; from csctl.cli import main; sys.argv[0] = 'csctl'; main()"
_IMPORT_TOTAL = re.compile(r"import time:\s+\d+ \|\s+(\d+) \| csctl\.cli$", re.MULTILINE)


def _env(tree: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CSCTL_")}
    env["CSCTL_INSECURE"] = "1"  # the coordinator serves plaintext on loopback (bench.common)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    return env


def cold_run(address: str, tree: Path | None) -> float:
    """Seconds from starting `csctl get jobs` in a new process until it exits (0)."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-P", "-c", _MAIN, "--server", address, "get", "jobs"],
        capture_output=True, env=_env(tree), cwd=tree or None, check=False,
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(done.stderr.decode())
    return elapsed


def import_ms(tree: Path | None) -> float:
    """Milliseconds `import csctl.cli` takes in a new process (python -X importtime)."""
    done = subprocess.run(
        [sys.executable, "-P", "-X", "importtime", "-c", "import csctl.cli"],
        capture_output=True, text=True, env=_env(tree), cwd=tree or None, check=True,
    )  # fmt: skip
    found = _IMPORT_TOTAL.search(done.stderr)
    assert found is not None, done.stderr[-500:]
    return int(found.group(1)) / 1000


def _summary(seconds: list[float]) -> dict[str, Any]:
    ordered = sorted(seconds)
    return {
        "p50_s": round(statistics.median(ordered), 3),
        "min_s": round(ordered[0], 3),
        "p90_s": round(ordered[int(0.9 * (len(ordered) - 1))], 3),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--compare", metavar="REV", help="also time REV's csctl, alternating")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args(argv)
    trees: dict[str, Path | None] = {"HEAD": None}
    if args.compare:
        commit, tree = commit_tree(args.compare)
        trees = {commit: tree, "HEAD": None}
    data_dir = fresh_dir("csctl_cold")
    prepare_store(data_dir, maintenance=SYSTEMS)  # the jobs stay QUEUED: a steady listing
    times: dict[str, list[float]] = {name: [] for name in trees}
    imports: dict[str, list[float]] = {name: [] for name in trees}
    with CoordinatorProcess(data_dir) as coordinator:
        address = coordinator.wait_address()
        with ApplianceClient(address, detach=True, insecure=True) as client:
            for n in range(args.jobs):
                client.submit(params=EXAMPLE_PARAMS, num_csx=1, num_steps=10,
                              labels={"bench": "csctl", "n": str(n)})  # fmt: skip
        for tree in trees.values():  # a first run of each: Python's bytecode caches
            cold_run(address, tree)
        for _ in range(args.runs):
            for name, tree in trees.items():
                times[name].append(cold_run(address, tree))
                imports[name].append(import_ms(tree))
    result: dict[str, Any] = {
        "jobs_listed": args.jobs,
        "runs": args.runs,
        "goal_s": 0.3,
    }
    for name in trees:
        result[name] = {
            "get_jobs": _summary(times[name]),
            "import_csctl_cli_ms": round(statistics.median(imports[name]), 1),
        }
    return result


if __name__ == "__main__":
    emit("csctl_cold", main(sys.argv[1:]))
