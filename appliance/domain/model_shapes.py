"""Model shapes known to the appliance, from the params `model` section (pure arithmetic).

The replica plan sizes MemoryX from `memory_bytes`: the weights plus the optimizer state MemoryX
keeps next to them, all float32.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from appliance.domain.params import FcMnistModel, Gpt2Model, Params, parse_params

BYTES_PER_PARAM = 4  # float32
# Optimizer state kept next to the weights in MemoryX, in copies of the weights.
OPTIMIZER_STATE_COPIES = {"sgd": 1, "adamw": 2, "adam": 2}

UnitShapes = dict[str, tuple[int, ...]]


def fc_layer_shapes(model: FcMnistModel) -> list[tuple[int, int]]:
    """(fan_in, fan_out) of each dense layer of the fc_mnist MLP."""
    sizes = [model.input_size, *model.hidden_sizes, model.num_classes]
    return list(itertools.pairwise(sizes))


def gpt2_unit_shapes(model: Gpt2Model) -> list[UnitShapes]:
    """Tensor shapes of each streamed unit: embeddings, one per block, then the final LN.

    The LM head is tied to `wte`, so it has no tensors of its own.
    """
    hidden, inner = model.hidden_size, model.inner_size
    embeddings: UnitShapes = {
        "wte": (model.vocab_size, hidden),
        "wpe": (model.max_position_embeddings, hidden),
    }
    block: UnitShapes = {
        "ln1_gain": (hidden,),
        "ln1_bias": (hidden,),
        "attn_qkv_weight": (hidden, 3 * hidden),
        "attn_qkv_bias": (3 * hidden,),
        "attn_proj_weight": (hidden, hidden),
        "attn_proj_bias": (hidden,),
        "ln2_gain": (hidden,),
        "ln2_bias": (hidden,),
        "mlp_fc_weight": (hidden, inner),
        "mlp_fc_bias": (inner,),
        "mlp_proj_weight": (inner, hidden),
        "mlp_proj_bias": (hidden,),
    }
    final: UnitShapes = {"lnf_gain": (hidden,), "lnf_bias": (hidden,)}
    return [embeddings, *(dict(block) for _ in range(model.num_hidden_layers)), final]


def unit_shapes(params: Params) -> list[UnitShapes]:
    """Tensor shapes of every streamed unit (layer) of the model, in forward order."""
    if isinstance(params.model, Gpt2Model):
        return gpt2_unit_shapes(params.model)
    return [{"weight": s, "bias": (s[1],)} for s in fc_layer_shapes(params.model)]


def head_units(params: Params) -> tuple[int, ...]:
    """Units whose tensors the loss head reads: GPT-2's LM head is tied to the embeddings."""
    return (0,) if isinstance(params.model, Gpt2Model) else ()


def parameter_count(params: Params | Mapping[str, Any]) -> int:
    """Number of trainable parameters; raises InvalidSpec for bad params."""
    count = 0
    for unit in unit_shapes(_parsed(params)):
        for shape in unit.values():
            size = 1
            for dim in shape:
                size *= dim
            count += size
    return count


def memory_bytes(params: Params | Mapping[str, Any]) -> int:
    """Weights plus optimizer state, the bytes MemoryX must hold for the job."""
    parsed = _parsed(params)
    kind = parsed.optimizer.optimizer_type
    return parameter_count(parsed) * BYTES_PER_PARAM * (1 + OPTIMIZER_STATE_COPIES[kind])


def _parsed(params: Params | Mapping[str, Any]) -> Params:
    """Params as given, parsed once: a submit's plan passes them parsed (parsing is most of
    what a submit costs the coordinator)."""
    return params if isinstance(params, Params) else parse_params(params)
