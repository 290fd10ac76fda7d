"""Input-feed benchmark: does input ever starve a CS-2, and what do the input workers cost?

    python -m bench.input_feed [--models fc_mnist,gpt2] [--csx 1,2,4] [--no-record]

(i) For fc_mnist (the workshop's shapes: input_size 784, hidden [256, 256], batch_size 128)
reading the digits as MNIST IDX files at 28x28 (tests/data_sets.py), and for the small gpt2 of
appliance/examples/gpt2 (sequence length 32, batch 16) reading the bundled corpus as the Model
Zoo's HDF5 shards, a training job at 1, 2 and 4 CS-2s (one input worker each): the share of
its training-step time each CS-2 waited for its next batch (the `input wait:` line every CS-2
logs at close), and the step-time breakdown: the CS-2's wait for its batch, the rest of its
RunStep (forward, backward, weight and gradient streaming), and the rest of the job's step
(the chief, MemoryX updates, the calls between them), each in ms per step. Goal: every
CS-2's share <= 5%.
(ii) The same 1-CS-2 jobs on a data set and on synthetic data, side by side in this run: CPU
milliseconds per step of every replica process (psutil, every thread, between the first and
the last progress report, as bench.weight_streaming measures it), by role.
Replicas are real processes against the fake coordinator of tests/integration/test_workers.py.
"""

# ruff: noqa: E402  (BLAS threads must be pinned before anything imports NumPy)
from __future__ import annotations

import os

from appliance.workers.models.numerics import pin_blas_threads

pin_blas_threads(os.environ)  # before NumPy loads: what every replica does

import argparse
import asyncio
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import emit
from bench.weight_streaming import cpu_per_step, sampled_job
from tests.data_sets import write_digits, write_gpt_text

GOAL_SHARE = 0.05
WAIT_LINE = re.compile(r"(cs2-\d+) INFO .*input wait: (\{.*\})")
STEPS = {"fc_mnist": 600, "gpt2": 600}
FC_MNIST = {
    "model": {"name": "fc_mnist", "input_size": 784, "hidden_sizes": [256, 256],
              "num_classes": 10},
    "train_input": {"data_processor": "MNISTDataProcessor", "batch_size": 128},
    "optimizer": {"optimizer_type": "sgd", "learning_rate": 0.05},
    "runconfig": {"seed": 1},
}  # fmt: skip
GPT2 = {
    "model": {"name": "gpt2", "hidden_size": 32, "num_hidden_layers": 2, "num_heads": 2,
              "filter_size": 128, "max_position_embeddings": 32},
    "train_input": {"data_processor": "GptHDF5DataProcessor", "batch_size": 16,
                    "max_sequence_length": 32},
    "optimizer": {"optimizer_type": "adamw", "learning_rate": 0.003},
    "runconfig": {"seed": 1},
}  # fmt: skip


def with_data(model: str, work: Path) -> dict[str, Any]:
    """The model's params reading its data set (written under `work` once)."""
    params = json.loads(json.dumps(FC_MNIST if model == "fc_mnist" else GPT2))
    if model == "fc_mnist":
        train, _ = write_digits(work / "digits", size=28)
    else:
        train, _ = write_gpt_text(work / "text", 32)
    params["train_input"]["data_dir"] = str(train)
    return params


def synthetic(params: dict[str, Any]) -> dict[str, Any]:
    copy: dict[str, Any] = json.loads(json.dumps(params))
    for key in ("data_dir", "data_processor"):
        copy["train_input"].pop(key, None)
    return copy


async def training_job(params: dict[str, Any], num_csx: int, steps: int) -> dict[str, Any]:
    """Run one job: its steady step time, every CS-2's input wait, CPU per step by role."""
    progress, logs, cpu_samples = await sampled_job(params, num_csx, steps)
    first, last = progress[0], progress[-1]
    step_seconds = (last.reported_at - first.reported_at) / max(last.step - first.step, 1)
    waits = {name: json.loads(totals) for name, totals in WAIT_LINE.findall(logs)}
    return {
        "step_ms": 1000 * step_seconds,
        "waits": waits,
        "cpu_ms_per_step": cpu_per_step(cpu_samples),
    }


def breakdown(job: dict[str, Any]) -> dict[str, Any]:
    """ms per step: the CS-2s' wait for a batch, the rest of their RunStep, the rest of the
    job's step (means over the CS-2s); each CS-2's share of its step time spent waiting."""
    waits = job["waits"].values()
    wait_ms = sum(1000 * w["wait_seconds"] / w["batches"] for w in waits) / len(waits)
    run_step_ms = sum(1000 * w["step_seconds"] / w["batches"] for w in waits) / len(waits)
    shares = {name: w["share"] for name, w in sorted(job["waits"].items())}
    return {
        "step_ms": round(job["step_ms"], 3),
        "wait_ms": round(wait_ms, 3),
        "cs2_compute_ms": round(run_step_ms - wait_ms, 3),
        "rest_ms": round(job["step_ms"] - run_step_ms, 3),
        "wait_share_by_cs2": shares,
        "worst_share": max(shares.values()),
    }


async def bench_model(model: str, counts: list[int], work: Path) -> dict[str, Any]:
    params = with_data(model, work)
    steps = STEPS[model]
    result: dict[str, Any] = {"model": model, "steps": steps, "by_csx": {}}
    for num_csx in counts:
        job = await training_job(params, num_csx, steps)
        result["by_csx"][str(num_csx)] = breakdown(job)
        if num_csx == 1:
            result["cpu_ms_per_step"] = {"data_set": job["cpu_ms_per_step"]}
    plain = await training_job(synthetic(params), 1, steps)
    result["cpu_ms_per_step"]["synthetic"] = plain["cpu_ms_per_step"]
    result["step_ms_one_cs2_synthetic"] = round(plain["step_ms"], 3)
    totals = {k: sum(v.values()) for k, v in result["cpu_ms_per_step"].items() if v}
    result["cpu_ms_per_step_total"] = {k: round(v, 3) for k, v in totals.items()}
    result["worst_share"] = max(r["worst_share"] for r in result["by_csx"].values())
    result["met"] = result["worst_share"] <= GOAL_SHARE
    return result


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="fc_mnist,gpt2")
    parser.add_argument("--csx", default="1,2,4", help="CS-2 counts")
    parser.add_argument(
        "--no-record", action="store_true", help="do not merge into bench/results.json"
    )
    args = parser.parse_args()
    counts = [int(n) for n in args.csx.split(",")]
    with tempfile.TemporaryDirectory() as work:
        models = [await bench_model(m, counts, Path(work)) for m in args.models.split(",")]
    emit(
        "input_feed",
        {
            "goal": f"every CS-2 waits for its batches <= {GOAL_SHARE:.0%} of its step time",
            "models": models,
            "load_average": os.getloadavg(),
            "met": all(m["met"] for m in models),
        },
    )


if __name__ == "__main__":
    asyncio.run(main())
