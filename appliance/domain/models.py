"""Model shapes known to the appliance, from the params `model` section (pure arithmetic)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from appliance.domain.errors import InvalidSpec

BYTES_PER_PARAM = 4  # float32
# Optimizer state kept next to the weights in MemoryX, in copies of the weights.
OPTIMIZER_STATE_COPIES = {"sgd": 1, "adamw": 2, "adam": 2}


def fc_layer_shapes(model: Mapping[str, Any]) -> list[tuple[int, int]]:
    """(fan_in, fan_out) of each dense layer of the fc_mnist MLP."""
    try:
        input_size = int(model.get("input_size", 784))
        hidden = [int(h) for h in model.get("hidden_sizes", [256, 256])]
        classes = int(model.get("num_classes", 10))
    except (TypeError, ValueError):
        raise InvalidSpec(
            "model.input_size, model.hidden_sizes and model.num_classes must be integers",
            field="params",
        ) from None
    sizes = [input_size, *hidden, classes]
    if any(s <= 0 or s > 1 << 20 for s in sizes):
        raise InvalidSpec("fc_mnist layer sizes must be between 1 and 1048576", field="params")
    return list(itertools.pairwise(sizes))


def parameter_count(params: Mapping[str, Any]) -> int:
    model = params.get("model") or {}
    name = model.get("name", "fc_mnist")
    if name != "fc_mnist":
        raise InvalidSpec(f"model.name {name!r} is not known; use fc_mnist", field="params")
    return sum(i * o + o for i, o in fc_layer_shapes(model))


def memory_bytes(params: Mapping[str, Any]) -> int:
    """Weights plus optimizer state, the bytes MemoryX must hold for the job."""
    optimizer = params.get("optimizer") or {}
    kind = str(optimizer.get("optimizer_type", "sgd")).lower()
    copies = OPTIMIZER_STATE_COPIES.get(kind)
    if copies is None:
        known = ", ".join(sorted(OPTIMIZER_STATE_COPIES))
        raise InvalidSpec(
            f"optimizer.optimizer_type {kind!r} is not one of {known}", field="params"
        )
    return parameter_count(params) * BYTES_PER_PARAM * (1 + copies)
