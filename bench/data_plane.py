"""The data plane at memory speed (#35): gRPC against shared memory, side by side in one run.

    python -m bench.data_plane [--runs 3] [--models fc_mnist,gpt2] [--no-record]

Every figure is measured for both transports in the same run on the same machine, the two
alternating (gRPC first in odd runs, shared memory first in even ones), each job's replicas
set to one transport with APPLIANCE_DATA_PLANE (as `appliance serve --worker-data-plane` sets
it). Replicas are real processes against the fake coordinator of
tests/integration/test_workers.py, as in bench.weight_streaming, whose measurements this reuses.
Per model and transport:
- the 1-CS-2 step against the single-process NumPy loop of the same model and batch (measured
  in the same run): goal fc_mnist <= 2x, GPT <= 1.1x;
- steps/s at 1, 2 and 4 CS-2s (fc_mnist at batch 128, as the issue states; the global batch is
  fixed, so N CS-2s do the same work per step between them and each gets all the weights):
  goal fc_mnist 2 CS-2s >= 1.0x and 4 CS-2s >= 0.8x the 1-CS-2 figure, GPT 2 CS-2s >= 1.7x;
- bytes sent per step by role against the minimum of the schedule (<= 1.1x);
- CPU per step of every role of the 1-CS-2 job (psutil, every thread).
With --runs N each run is a new process; each figure is judged on its median run.
"""

# ruff: noqa: E402  (BLAS threads must be pinned before anything imports NumPy)
from __future__ import annotations

import os

from appliance.workers.models.numerics import pin_blas_threads

pin_blas_threads(os.environ)

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.weight_streaming import (
    cpu_budget,
    model_params,
    single_process_step_seconds,
    streamed_job,
    traffic_per_step,
)

TRANSPORTS = ("grpc", "shared-memory")
STEPS = {"fc_mnist": 600, "gpt2": 24}
SCALING = {"fc_mnist": (1, 2, 4), "gpt2": (1, 2)}
STEP_GOAL = {"fc_mnist": 2.0, "gpt2": 1.1}  # 1-CS-2 step / single process, at most
SCALING_GOAL = {"fc_mnist": {"2": 1.0, "4": 0.8}, "gpt2": {"2": 1.7}}  # x the 1-CS-2 rate
MAX_TRAFFIC = 1.1


def params_of(model: str, scaling: bool) -> dict[str, Any]:
    params = model_params(model)
    if model == "fc_mnist" and scaling:  # the scaling figure is at batch 128
        params = {**params, "train_input": {**params["train_input"], "batch_size": 128}}
    return params


async def one_transport(model: str, transport: str, reference: float) -> dict[str, Any]:
    os.environ["APPLIANCE_DATA_PLANE"] = transport  # the replicas inherit it
    steps = STEPS[model]
    params = params_of(model, scaling=False)
    first = await streamed_job(params, 1, steps)
    step_seconds = 1 / first["steps_per_second"]
    result: dict[str, Any] = {
        "one_cs2_step_ms": round(1000 * step_seconds, 3),
        "one_cs2_vs_single_process": round(step_seconds / reference, 3),
        "one_cs2_cpu": cpu_budget(first["cpu_ms_per_step"], reference),
        "traffic_one_cs2": traffic_per_step(params, first, 1, steps)["ratio"],
    }
    scaled = params_of(model, scaling=True)
    rates = {}
    cpu = {}
    for num_csx in SCALING[model]:
        same = num_csx == 1 and scaled == params
        job = first if same else await streamed_job(scaled, num_csx, steps)
        rates[str(num_csx)] = round(job["steps_per_second"], 2)
        cpu[str(num_csx)] = cores_model(job["cpu_ms_per_step"], num_csx, job["swarmx"])
        if num_csx == max(SCALING[model]):
            result[f"traffic_{num_csx}_cs2"] = traffic_per_step(scaled, job, num_csx, steps)[
                "ratio"
            ]
    result["steps_per_second"] = rates
    result["cpu_by_cs2_count"] = cpu
    result["scaling_vs_one_cs2"] = {n: round(r / rates["1"], 3) for n, r in rates.items()}
    return result


def cores_model(
    by_role: dict[str, float] | None, num_csx: int, swarmx: int
) -> dict[str, Any] | None:
    """A job's CPU per step by role, and what it implies: on 2 cores no step is shorter than
    the total over 2; with a core per replica, none is shorter than the busiest replica's own
    CPU per step (each replica's work is one event loop), which is what a machine with more
    cores would approach."""
    if by_role is None:
        return None
    count = {"cs2": num_csx, "swarmx": max(swarmx, 1)}
    per_replica = {role: ms / count.get(role, 1) for role, ms in by_role.items()}
    busiest = max(per_replica, key=per_replica.__getitem__)
    total = sum(by_role.values())
    return {
        "ms_per_step_by_role": by_role,
        "ms_per_step_total": round(total, 3),
        "two_core_floor_ms": round(total / 2, 3),
        "core_per_replica_floor_ms": round(per_replica[busiest], 3),
        "busiest_replica_role": busiest,
    }


async def measure(models: list[str], run: int) -> dict[str, Any]:
    """One run: every model, both transports (in an order that alternates between runs)."""
    order = TRANSPORTS if run % 2 else TRANSPORTS[::-1]
    results: dict[str, Any] = {}
    for model in models:
        reference = single_process_step_seconds(params_of(model, False), STEPS[model])
        results[model] = {
            "single_process_step_ms": round(1000 * reference, 3),
            "load_average_start": os.getloadavg(),
            **{t: await one_transport(model, t, reference) for t in order},
            "load_average_end": os.getloadavg(),
        }
    return results


def in_new_process(models: list[str], run: int) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.data_plane", "--no-record", "--run-number", str(run)]
    command += ["--models", ",".join(models)]
    output = subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True)
    measured: dict[str, Any] = json.loads(output.stdout)["runs"][0]
    return measured


def judged(models: list[str], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the runs of each figure, and whether each goal is met on them."""
    summary: dict[str, Any] = {}
    for model in models:
        per: dict[str, Any] = {}
        for transport in TRANSPORTS:
            figures = [run[model][transport] for run in runs]
            ratio = statistics.median(f["one_cs2_vs_single_process"] for f in figures)
            scaling = {
                n: statistics.median(f["scaling_vs_one_cs2"][n] for f in figures)
                for n in figures[0]["scaling_vs_one_cs2"]
            }
            traffic = max(
                value
                for f in figures
                for key in f
                if key.startswith("traffic_")
                for value in f[key].values()
            )
            cpu = [f["one_cs2_cpu"]["ms_per_step_total"] for f in figures if f["one_cs2_cpu"]]
            per[transport] = {
                "one_cs2_vs_single_process": ratio,
                "scaling_vs_one_cs2": scaling,
                "worst_traffic_ratio": traffic,
                "cpu_ms_per_step_total": statistics.median(cpu) if cpu else None,
                "step_goal_met": ratio <= STEP_GOAL[model],
                "scaling_goal_met": all(
                    scaling[n] >= floor for n, floor in SCALING_GOAL[model].items()
                ),
                "traffic_goal_met": traffic <= MAX_TRAFFIC,
            }
        summary[model] = per
    return summary


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="fc_mnist,gpt2")
    parser.add_argument("--runs", type=int, default=1, help="each in a new process")
    parser.add_argument("--run-number", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args()
    models = args.models.split(",")
    if args.runs == 1:
        runs = [await measure(models, args.run_number)]
    else:
        runs = [in_new_process(models, run) for run in range(1, args.runs + 1)]
    result = {
        "goal": "shared memory: fc_mnist 1-CS-2 step <= 2x the single process, GPT <= 1.1x; "
        "steps/s at 2 / 4 CS-2 >= 1.0x / 0.8x the 1-CS-2 figure (fc_mnist, batch 128), "
        "GPT at 2 CS-2 >= 1.7x; bytes per step <= 1.1x the schedule's minimum",
        "cpus": os.cpu_count(),
        "runs": runs,
        "medians": judged(models, runs),
    }
    print(json.dumps(result, indent=2))
    if not args.no_record:
        from bench.common import record

        record("data_plane", result, "python -m bench.data_plane " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    asyncio.run(main())
