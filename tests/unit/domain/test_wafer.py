"""A CS-2's wafer holds a ~125M GPT pipelined, not the talks' 1.3B GPT-3 XL, which streams."""

from __future__ import annotations

from typing import Any

import pytest

from appliance.domain.model_shapes import memory_bytes, parameter_count
from appliance.domain.params import PIPELINE, parse_params
from appliance.domain.wafer import WAFER_BYTES, WaferNeed, describe, gigabytes, wafer_needs

STREAMING = "weight_streaming"


def gpt(hidden: int, layers: int, heads: int, seq: int, batch: int) -> dict[str, Any]:
    """A talk's GPT shape, GPT-2's vocabulary, trained with AdamW."""
    return {
        "model": {
            "name": "gpt2", "hidden_size": hidden, "num_hidden_layers": layers,
            "num_heads": heads, "vocab_size": 50257, "max_position_embeddings": seq,
        },
        "train_input": {"batch_size": batch, "max_sequence_length": seq},
        "optimizer": {"optimizer_type": "adamw", "learning_rate": 1e-4},
    }  # fmt: skip


GPT2_SMALL = gpt(768, 12, 12, 1024, 8)
# GPT-3 XL at batch 64 x 2048 tokens (GPT-3 trained it at 512, the Model Zoo's config at 121).
GPT3_XL = gpt(2048, 24, 16, 2048, 64)
NEOX_20B = gpt(6144, 44, 64, 2048, 8)


def needs(raw: dict[str, Any], strategy: str, num_csx: int = 1) -> WaferNeed:
    return wafer_needs(parse_params(raw), num_csx, strategy)


def test_gpt2_small_fits_the_wafer_pipelined() -> None:
    assert parameter_count(GPT2_SMALL) == 124_439_808
    need = needs(GPT2_SMALL, PIPELINE)
    # 16 bytes a parameter: weights, gradients, Adam's two moments, all float32.
    assert need.weights == need.gradients == need.optimizer_state // 2 == 124_439_808 * 4
    # Per sample: 13 tensors of 1024 x 768 (embeddings, 12 blocks); the logits are recomputed.
    assert need.activations == 8 * 4 * 13 * 1024 * 768
    assert describe(need) == (
        "weights 0.5 GB, gradients 0.5 GB, optimizer state 1.0 GB, activations 0.3 GB"
    )
    assert gigabytes(need.total) == "2.3 GB"
    assert need.total < WAFER_BYTES


def test_gpt3_xl_does_not_fit_pipelined_but_streams_on_one_cs2() -> None:
    assert parameter_count(GPT3_XL) == 1_315_723_264
    pipelined = needs(GPT3_XL, PIPELINE)
    assert describe(pipelined) == (
        "weights 5.3 GB, gradients 5.3 GB, optimizer state 10.5 GB, activations 26.8 GB"
    )
    assert gigabytes(pipelined.total) == "47.9 GB"
    assert pipelined.total > WAFER_BYTES
    streaming = needs(GPT3_XL, STREAMING)
    assert streaming.optimizer_state == 0
    assert streaming.activations == pipelined.activations
    # Held at most: the embeddings (the largest unit) and a block, the embeddings' gradient.
    embeddings, block = (50257 + 2048) * 2048 * 4, (12 * 2048 * 2048 + 13 * 2048) * 4
    assert (streaming.weights, streaming.gradients) == (embeddings + block, embeddings)
    assert streaming.total < WAFER_BYTES


def test_neox_20b_streams_and_needs_its_memoryx() -> None:
    assert parameter_count(NEOX_20B) == 20_256_221_184
    assert needs(NEOX_20B, PIPELINE).total > 8 * WAFER_BYTES
    streaming = needs(NEOX_20B, STREAMING)
    assert describe(streaming) == (
        "weights 3.6 GB, gradients 1.8 GB, optimizer state 0.0 GB, activations 18.1 GB"
    )
    assert gigabytes(streaming.total) == "23.6 GB"
    assert memory_bytes(NEOX_20B) == 20_256_221_184 * 12  # weights and Adam's two moments


@pytest.mark.parametrize(("num_csx", "shard"), [(1, 64), (3, 22), (4, 16), (64, 1)])
def test_each_streaming_cs2_keeps_the_activations_of_its_shard(num_csx: int, shard: int) -> None:
    one = needs({**GPT3_XL, "train_input": {"batch_size": 1, "max_sequence_length": 2048}},
                STREAMING)  # fmt: skip
    assert needs(GPT3_XL, STREAMING, num_csx).activations == shard * one.activations


def test_fc_mnist_keeps_each_layers_input_and_sgd_one_copy() -> None:
    raw = {"model": {"name": "fc_mnist", "hidden_sizes": [256, 256]},
           "train_input": {"batch_size": 10}}  # fmt: skip
    need = needs(raw, PIPELINE)
    weights = (784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10) * 4
    assert need == WaferNeed(weights, weights, weights, 10 * (784 + 256 + 256 + 10) * 4)
    streaming = needs(raw, STREAMING, num_csx=2)
    first, second = (784 * 256 + 256) * 4, (256 * 256 + 256) * 4
    assert streaming == WaferNeed(first + second, first, 0, 5 * (784 + 256 + 256 + 10) * 4)
