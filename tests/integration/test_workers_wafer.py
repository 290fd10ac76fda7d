"""Weight streaming as the appliance-mode article describes it, on real replica processes.

The wafer holds activations, not the model: a CS-2 holds the unit it computes on and one unit
prefetched after it, never the whole model; the units stream forward, and again in reverse for
backward, so SwarmX sends each CS-2 every unit twice per step (a tied head's units once more).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from appliance._proto.v1 import common_pb2
from appliance.domain.model_shapes import head_units, unit_shapes
from appliance.domain.params import parse_params
from appliance.domain.weight_schedule import training_order
from appliance.workers.roles.cs2_weights import PREFETCH_UNITS
from tests.integration.test_workers import RunningJob, run_job
from tests.model_specs import FC, GPT, with_

TRAFFIC = re.compile(r"tensor traffic sent: (\{.*\})")
# fc_mnist of three units of very different sizes: holding the whole model is far more than the
# largest unit and one more.
THREE_UNITS = with_(FC, model={"input_size": 300, "hidden_sizes": [200, 16]})


def unit_sizes(params: dict[str, Any]) -> list[int]:
    """Bytes of each streamed unit's float32 weights."""
    return [
        4 * sum(math.prod(shape) for shape in unit.values())
        for unit in unit_shapes(parse_params(params))
    ]


def sent(job: RunningJob, replica: str) -> dict[str, int]:
    found = TRAFFIC.findall((job.log_dir / f"{replica}.log").read_text())
    assert len(found) == 1
    traffic: dict[str, int] = json.loads(found[0])
    return traffic


@pytest.mark.parametrize("model", ["fc_mnist", "gpt2"])
@pytest.mark.parametrize("num_csx", [1, 2])
async def test_a_cs2_holds_a_unit_and_one_prefetched_never_the_whole_model(
    tmp_path: Path, model: str, num_csx: int
) -> None:
    params = THREE_UNITS if model == "fc_mnist" else GPT
    num_steps = 4
    async with run_job(
        tmp_path, num_csx, 1, 1, num_steps, params, mode=common_pb2.MODE_TRAIN_AND_EVAL
    ) as job:
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()
    sizes = sorted(unit_sizes(params), reverse=True)
    bound = sum(sizes[: 1 + PREFETCH_UNITS])  # the largest unit and the next largest
    final = json.loads((tmp_path / "model" / "metrics.json").read_text())
    print(f"{model} on {num_csx}: units {sizes}, peak {final['peak_weight_bytes']}")
    assert sizes[-1] <= final["peak_weight_bytes"] <= bound < sum(sizes)
    lines = (tmp_path / "model" / "metrics.jsonl").read_text().splitlines()
    peaks = [json.loads(line).get("peak_weight_bytes") for line in lines]
    assert [p for p in peaks if p is not None] and all(p is None or p <= bound for p in peaks)


@pytest.mark.parametrize("model", ["fc_mnist", "gpt2"])
async def test_every_unit_is_broadcast_forward_and_again_in_reverse_for_backward(
    tmp_path: Path, model: str
) -> None:
    params = THREE_UNITS if model == "fc_mnist" else GPT
    num_csx, num_steps = 2, 3
    async with run_job(tmp_path, num_csx, 1, 1, num_steps, params) as job:
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()
    sizes = unit_sizes(params)
    order = training_order(len(sizes), head_units(parse_params(params)))
    broadcast = sum(sizes[unit] for unit in order)  # per step, to each CS-2
    assert broadcast >= 2 * sum(sizes)
    weights = sent(job, "swarmx-0")["weights"]
    gradients = sum(sent(job, f"cs2-{i}")["gradients"] for i in range(num_csx))
    # Serialized bytes: the tensors and a few headers per chunk.
    assert 1.0 <= weights / (num_csx * num_steps * broadcast) <= 1.1
    assert 1.0 <= gradients / (num_csx * num_steps * sum(sizes)) <= 1.1
