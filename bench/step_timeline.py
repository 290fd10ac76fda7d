"""Where a weight-streaming step's time goes: the timeline of its critical path.

    python -m bench.step_timeline [--model fc_mnist] [--steps 600] [--trace-from 200]
        [--trace-steps 300] [--json]

Runs a 1-CS-2 job (1 SwarmX, 1 MemoryX; replicas are real processes against the fake
coordinator of tests/integration/test_workers.py) with APPLIANCE_STEP_TRACE set, so every replica
records when each unit's weights and gradient pass through it (appliance.workers.step_trace).
Then it follows unit 0, the first unit forward and the last backward, around the loop that
bounds the step rate: its gradient of step k goes CS-2 -> SwarmX -> MemoryX, is applied, and its
weights of version k + 1 come back MemoryX -> SwarmX -> CS-2; the next forward and backward
produce its gradient of step k + 1. Prints the median of each segment over the traced steps and
the median step period. Nothing is recorded: this is a diagnostic for bench.weight_streaming.
"""

# ruff: noqa: E402  (BLAS threads must be pinned before anything imports NumPy)
from __future__ import annotations

import os

from appliance.workers.models.numerics import pin_blas_threads

pin_blas_threads(os.environ)  # before NumPy loads: what every replica does

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from appliance.workers import step_trace
from bench.weight_streaming import model_params
from tests.integration.test_workers import run_job

# The loop of unit 0 from its gradient of step k to its gradient of step k + 1:
# (segment name, (event, step offset) it starts at, (event, step offset) it ends at).
CHAIN = (
    ("CS-2 -> SwarmX (gradient)", ("cs2_gradient_out", 0), ("swarmx_gradient_in", 0)),
    ("SwarmX reduce", ("swarmx_gradient_in", 0), ("swarmx_gradient_out", 0)),
    ("SwarmX -> MemoryX (gradient)", ("swarmx_gradient_out", 0), ("memoryx_gradient_in", 0)),
    ("MemoryX update", ("memoryx_gradient_in", 0), ("memoryx_updated", 0)),
    ("MemoryX weights out", ("memoryx_updated", 0), ("memoryx_weights_out", 1)),
    ("MemoryX -> SwarmX (weights)", ("memoryx_weights_out", 1), ("swarmx_weights_in", 1)),
    ("SwarmX -> CS-2 (weights)", ("swarmx_weights_in", 1), ("cs2_weights_in", 1)),
    ("CS-2 forward + backward", ("cs2_weights_in", 1), ("cs2_gradient_out", 1)),
)


def read_events(directory: Path) -> dict[tuple[str, int, int], int]:
    """(event, step, unit) -> time_ns, from every replica's trace file."""
    events: dict[tuple[str, int, int], int] = {}
    for path in sorted(directory.glob("*.tsv")):
        for line in path.read_text().splitlines():
            stamp, event, step, unit = line.split("\t")
            events[event, int(step), int(unit)] = int(stamp)
    return events


def chain_medians(events: dict[tuple[str, int, int], int]) -> dict[str, Any]:
    """Median milliseconds of each segment of unit 0's loop, and of the step period."""
    segments: dict[str, list[float]] = defaultdict(list)
    steps = sorted({step for (event, step, _) in events if event == "chief_run_step"})
    for step in steps:
        stamps = [
            (events.get((start, step + s0, 0)), events.get((end, step + s1, 0)))
            for _, (start, s0), (end, s1) in CHAIN
        ]
        if all(a is not None and b is not None for a, b in stamps):
            for (name, _, _), (a, b) in zip(CHAIN, stamps, strict=True):
                assert a is not None and b is not None
                segments[name].append((b - a) / 1e6)
    periods = [
        (events["chief_run_step", b, -1] - events["chief_run_step", a, -1]) / 1e6
        for a, b in itertools.pairwise(steps)
        if b == a + 1
    ]
    if not periods or not segments:
        raise SystemExit("no complete step in the trace window: use more --steps")
    medians = {name: round(statistics.median(values), 3) for name, values in segments.items()}
    return {
        "steps_traced": len(next(iter(segments.values()))),
        "step_period_ms": round(statistics.median(periods), 3),
        "unit0_loop_ms": medians,
        "unit0_loop_total_ms": round(sum(medians.values()), 3),
    }


async def trace_job(model: str, steps: int, first: int, count: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        trace_dir = Path(tmp) / "trace"
        os.environ[step_trace.ENV_DIR] = str(trace_dir)  # the replicas inherit it
        os.environ[step_trace.ENV_FROM] = str(first)
        os.environ[step_trace.ENV_STEPS] = str(count)
        async with run_job(Path(tmp), 1, 1, 1, steps, model_params(model)) as job:
            code = await job.exit_code("chief-0", within=600)
            for name in job.processes:
                await job.exit_code(name, within=30)
            assert code == 0, job.logs()
        return {"model": model, "steps": steps, **chain_medians(read_events(trace_dir))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="fc_mnist", choices=["fc_mnist", "gpt2"])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--trace-from", type=int, default=200, help="first step traced")
    parser.add_argument("--trace-steps", type=int, default=300, help="steps traced")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args()
    result = asyncio.run(trace_job(args.model, args.steps, args.trace_from, args.trace_steps))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.model}: step period {result['step_period_ms']} ms (median of "
          f"{result['steps_traced']} traced steps); unit 0's loop, medians:")  # fmt: skip
    for name, ms in result["unit0_loop_ms"].items():
        print(f"  {ms:8.3f} ms  {name}")
    print(f"  {result['unit0_loop_total_ms']:8.3f} ms  in all")


if __name__ == "__main__":
    main()
