"""The plan refuses a job whose CS-2s need more than the pool's largest wafer, in one line
naming the sizes, and carries what each CS-2 needs."""

from __future__ import annotations

import dataclasses
import json

import pytest

from appliance.domain.errors import InsufficientCapacity
from appliance.domain.inventory import Node, NodeKind, default_pool
from appliance.domain.params import parse_params
from appliance.domain.plan import ReplicaPlan, Role, plan_replicas
from appliance.domain.spec import JobSpec, validate_spec
from appliance.domain.wafer import wafer_needs
from appliance.store.rows import plan_from_json, plan_to_json


def xl(strategy: str, num_csx: int = 1, batch: int = 64) -> JobSpec:
    """The talks' GPT-3 XL (1.3B) at batch 64 x 2048 tokens, AdamW."""
    params = {
        "model": {
            "name": "gpt2", "hidden_size": 2048, "num_hidden_layers": 24, "num_heads": 16,
            "vocab_size": 50257, "max_position_embeddings": 2048,
        },
        "train_input": {"batch_size": batch, "max_sequence_length": 2048},
        "optimizer": {"optimizer_type": "adamw", "learning_rate": 1e-4},
        "runconfig": {"execution_strategy": strategy},
    }  # fmt: skip
    return validate_spec(params_yaml=params, num_csx=num_csx, num_steps=1)


def big_pool(wafers: tuple[int, ...] = (40 * 10**9,) * 4) -> list[Node]:
    """Room in MemoryX for the XL's 15.8 GB; systems with the given wafers."""
    rest = [n for n in default_pool(memoryx_bytes=64 << 30) if n.kind is not NodeKind.SYSTEM]
    systems = [
        Node(f"cs2-{i:02d}", NodeKind.SYSTEM, 1, wafer_bytes=w) for i, w in enumerate(wafers)
    ]
    return systems + rest


def test_a_pipelined_model_larger_than_the_wafer_is_refused_naming_the_sizes() -> None:
    with pytest.raises(InsufficientCapacity) as caught:
        plan_replicas(xl("pipeline"), big_pool())
    assert caught.value.field == "params"
    assert str(caught.value) == (
        "the model needs 47.9 GB on a CS-2's wafer in pipelined mode (weights 5.3 GB, "
        "gradients 5.3 GB, optimizer state 10.5 GB, activations 26.8 GB) but a CS-2 holds "
        "40.0 GB; use runconfig.execution_strategy weight_streaming"
    )


def test_the_largest_wafer_of_the_pool_is_what_counts() -> None:
    plan = plan_replicas(xl("pipeline"), big_pool((40 * 10**9, 50 * 10**9)))
    assert plan.group(Role.MEMORYX).count == 0
    assert (
        plan.wafer_bytes == wafer_needs(parse_params(xl("pipeline").params), 1, "pipeline").total
    )


def test_weight_streaming_carries_each_cs2s_need_and_refuses_a_shard_too_big() -> None:
    plan = plan_replicas(xl("weight_streaming", num_csx=2), big_pool())
    need = wafer_needs(parse_params(xl("weight_streaming").params), 2, "weight_streaming")
    assert plan.wafer_bytes == need.total < 20 * 10**9
    with pytest.raises(InsufficientCapacity, match=r"^the model needs 54\.7 GB on a CS-2's "
                       r"wafer in weight-streaming mode \(.*\) but a CS-2 holds 40\.0 GB; "
                       r"use more CS-2s or a smaller train_input\.batch_size$"):  # fmt: skip
        plan_replicas(xl("weight_streaming", batch=128), big_pool())
    assert plan_replicas(xl("weight_streaming", num_csx=2, batch=128), big_pool()).wafer_bytes


def test_a_plan_made_elsewhere_needs_no_wafer() -> None:
    plan = ReplicaPlan(groups=(), model_bytes=0)
    assert plan.wafer_bytes == 0
    assert dataclasses.replace(plan, wafer_bytes=5).wafer_bytes == 5


def test_a_stored_plan_keeps_its_wafer_and_an_old_one_needs_none() -> None:
    plan = plan_replicas(xl("weight_streaming"), big_pool())
    assert plan_from_json(json.dumps(plan_to_json(plan))) == plan
    old = {"model_bytes": 1, "groups": [["chief", 1, 0]]}
    assert plan_from_json(old).wafer_bytes == 0
