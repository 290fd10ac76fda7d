"""The finite wafer (#34): the second broadcast's cost, and the pipelined mode, in one run.

    python -m bench.wafer_schedule [--before COMMIT] [--runs 2] [--models fc_mnist,gpt2]

Weight streaming before and after the faithful schedule: `bench.weight_streaming --no-record`
runs alternately in a checkout of COMMIT (default BEFORE: the last commit whose CS-2 took every
unit once, last first, and kept the whole model for the step) and in this tree, `--runs` times
each, on this machine, so both sides see the same load. For each model it keeps, per side, the
median run's 1/2/4-CS-2 steps/s, the 1-CS-2 step time against the single-process reference of
the same run, and the CPU time per step of each replica of the 1-CS-2 job; the difference is
what the second broadcast costs. The data-plane issue's goal (a 1-CS-2 fc_mnist step at most
2x the reference) applies to the new schedule: its figure is recorded here.

The pipelined mode: a pipelined job (one CS-2 holding the weights and the optimizer state, no
MemoryX, no SwarmX) against the single-process reference of the same run. Goal: at most 1.2x.
"""

# ruff: noqa: E402  (BLAS threads must be pinned before anything imports NumPy)
from __future__ import annotations

import os

from appliance.workers.models.numerics import pin_blas_threads

pin_blas_threads(os.environ)  # before NumPy loads: what every replica does

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.weight_streaming import (
    DEFAULT_STEPS,
    ROOT,
    model_params,
    single_process_step_seconds,
    streamed_job,
)

BEFORE = "1684dea"  # the domain's schedule in place, the data plane still the old one
PIPELINED_GOAL = 1.2  # a pipelined step / the single process's, at most
STREAMING_GOAL = 2.0  # the data-plane issue's goal for a 1-CS-2 fc_mnist step


def weight_streaming_run(tree: Path, models: list[str]) -> list[dict[str, Any]]:
    """One run of bench.weight_streaming in `tree`, in a new interpreter."""
    command = [sys.executable, "-m", "bench.weight_streaming", "--no-record"]
    command += ["--models", ",".join(models)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    output = subprocess.run(
        command, cwd=tree, env=env, check=True, stdout=subprocess.PIPE, text=True
    )
    results: list[dict[str, Any]] = json.loads(output.stdout)["weight_streaming"]
    return results


def side(runs: list[list[dict[str, Any]]], model: str) -> dict[str, Any]:
    """One side's figures for `model`: each run's, and the medians."""
    mine = [next(r for r in run if r["model"] == model) for run in runs]
    per_run = [
        {
            "one_cs2_vs_single_process": round(r["one_cs2_vs_single_process"], 3),
            "one_cs2_step_ms": round(1000 * r["one_cs2_step_seconds"], 3),
            "steps_per_second": {k: round(v, 2) for k, v in r["steps_per_second"].items()},
            "cpu_ms_per_step": (r["one_cs2_cpu"] or {}).get("ms_per_step_total"),
            "weights_bytes_per_step_to_cs2": r["traffic_one_cs2"]["bytes_per_step"][
                "swarmx_weights"
            ],
        }
        for r in mine
    ]

    def median(key: str) -> float:
        return round(statistics.median(float(run[key] or 0) for run in per_run), 3)

    return {
        "runs": per_run,
        "one_cs2_vs_single_process": median("one_cs2_vs_single_process"),
        "one_cs2_step_ms": median("one_cs2_step_ms"),
        "cpu_ms_per_step": median("cpu_ms_per_step"),
        "steps_per_second": {
            n: round(statistics.median(run["steps_per_second"][n] for run in per_run), 2)
            for n in ("1", "2", "4")
        },
    }


async def pipelined(model: str, runs: int) -> dict[str, Any]:
    """A pipelined job's step time against the single-process reference, `runs` times."""
    params = {**model_params(model), "runconfig": {"execution_strategy": "pipeline"}}
    steps = DEFAULT_STEPS[model]
    ratios, step_ms = [], []
    for _ in range(runs):
        reference = single_process_step_seconds(params, steps)
        job = await streamed_job(params, 1, steps, pipelined=True)
        seconds = 1 / job["steps_per_second"]
        ratios.append(round(seconds / reference, 3))
        step_ms.append((round(1000 * seconds, 3), round(1000 * reference, 3)))
    ratio = statistics.median(ratios)
    return {
        "ratios": ratios,
        "step_ms_and_reference_ms": step_ms,
        "vs_single_process": ratio,
        "goal": PIPELINED_GOAL,
        "met": ratio <= PIPELINED_GOAL,
    }


def checkout(commit: str, where: Path) -> Path:
    tree = where / "before"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), commit],
        check=True,
    )
    return tree


def alternate(
    commit: str, runs: int, models: list[str]
) -> tuple[list[list[dict[str, Any]]], list[list[dict[str, Any]]]]:
    """`runs` runs of bench.weight_streaming at `commit` and here, alternately."""
    before: list[list[dict[str, Any]]] = []
    after: list[list[dict[str, Any]]] = []
    with tempfile.TemporaryDirectory() as where:
        tree = checkout(commit, Path(where))
        try:
            for _ in range(runs):  # alternate, so both sides see the same machine
                before.append(weight_streaming_run(tree, models))
                after.append(weight_streaming_run(ROOT, models))
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True
            )
    return before, after


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=BEFORE)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--models", default="fc_mnist,gpt2")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    models = args.models.split(",")
    before, after = await asyncio.to_thread(alternate, args.before, args.runs, models)
    results = []
    for model in models:
        old, new = side(before, model), side(after, model)
        results.append(
            {
                "model": model,
                "before": old,
                "after": new,
                "step_time_after_vs_before": round(
                    new["one_cs2_step_ms"] / old["one_cs2_step_ms"], 3
                ),
                "cpu_after_vs_before": round(
                    new["cpu_ms_per_step"] / max(old["cpu_ms_per_step"], 1e-9), 3
                ),
                "pipelined": await pipelined(model, args.runs),
            }
        )
    fc = next((r for r in results if r["model"] == "fc_mnist"), None)
    summary = {
        "before": args.before,
        "models": results,
        "streaming_fc_mnist_vs_single_process": fc and fc["after"]["one_cs2_vs_single_process"],
        "streaming_goal_met": bool(
            fc and fc["after"]["one_cs2_vs_single_process"] <= STREAMING_GOAL
        ),
        "met": all(r["pipelined"]["met"] for r in results),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
    }
    print(json.dumps(summary, indent=2))
    if not args.no_record:
        from bench.common import record

        record(
            "wafer_schedule",
            {"goal": f"pipelined step <= {PIPELINED_GOAL}x single process", **summary},
            "python -m bench.wafer_schedule " + " ".join(sys.argv[1:]),
        )


if __name__ == "__main__":
    asyncio.run(main())
