"""The scheduler at cluster scale (#18): the landed scheduler and this one side by side (the
whole pipeline through `appliance serve` is bench/pipeline.py).

    python -m bench.scheduler_scale [--landed de2a58e] [--passes 20]

1. Passes (B4, B3b at the scheduler, rows written): bench/scheduler_passes.py run as its own
   process under each code tree (the landed commit, unpacked with `git archive`, and this
   one) on the same workload: 1k, 10k and 100k queued on 64 systems, and 100k on 2,048
   systems (1,024 MemoryX, 512 SwarmX). Cost per decision, its log-log slope from 1k to 100k,
   decisions/s, pass p50/p99 and rows written per decision.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.common import ROOT, WORK, code_tree, emit

PASSES = ROOT / "bench" / "scheduler_passes.py"
SIZES = [
    (1_000, 64, 32, 16),
    (10_000, 64, 32, 16),
    (100_000, 64, 32, 16),
    (100_000, 2048, 1024, 512),
]


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landed", default="de2a58e", help="the landed commit to compare with")
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    trees = {"landed": code_tree(args.landed), "current": ROOT}
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
    emit("scheduler_scale", result)


if __name__ == "__main__":
    main()
