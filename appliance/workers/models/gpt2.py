"""A small GPT-2-style byte-level decoder as a streamed model.

Units (what MemoryX holds and SwarmX broadcasts, one at a time):
- unit 0: token and position embeddings (`wte`, `wpe`);
- units 1..L: one pre-LayerNorm transformer block each (causal self-attention, GELU MLP);
- unit L+1: the final LayerNorm.
The LM head is tied to `wte`: the CS-2 keeps unit 0's weights for the step, the head's `wte`
gradient comes back as a tied gradient and is added to unit 0's lookup gradient, which is the
last one backward produces, so unit 0 is reduced once, complete.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from appliance.domain.model_shapes import gpt2_unit_shapes
from appliance.domain.params import DEFAULT_EVAL_BATCHES, Gpt2Model, Params
from appliance.workers.models import gpt2_layers as nn
from appliance.workers.models.model import Array, Batch, HeadOutput, Labels, Tensors
from appliance.workers.models.text_corpus import TextCorpus, load_corpus

_INIT_STREAM = 2
INIT_STD = 0.02


class Gpt2:
    """The streamed GPT-2 model of one job's params."""

    def __init__(self, params: Params, corpus: TextCorpus | None = None) -> None:
        assert isinstance(params.model, Gpt2Model)
        self.config = params.model
        self.seed = params.runconfig.seed
        self.batch_size = params.train_input.batch_size
        self.eval_batch_size = params.eval_input.batch_size
        self.num_eval_batches = params.eval_input.num_batches or DEFAULT_EVAL_BATCHES
        self.sequence_length = (
            params.train_input.max_sequence_length or self.config.max_position_embeddings
        )
        if self.sequence_length > self.config.max_position_embeddings:
            raise ValueError(
                f"train_input.max_sequence_length {self.sequence_length} is more than "
                f"model.max_position_embeddings {self.config.max_position_embeddings}"
            )
        self._shapes = gpt2_unit_shapes(self.config)
        self._corpus = corpus or load_corpus()

    @property
    def num_units(self) -> int:
        return len(self._shapes)

    @property
    def predictions_per_sample(self) -> int:
        return self.sequence_length

    @property
    def head_units(self) -> tuple[int, ...]:
        return (0,)

    def unit_shapes(self, unit: int) -> dict[str, tuple[int, ...]]:
        return self._shapes[unit]

    def init_unit(self, unit: int) -> Tensors:
        """N(0, 0.02) matrices (output projections scaled by 1/sqrt(2L)), LN gain 1, biases 0."""
        rng = np.random.default_rng([self.seed, _INIT_STREAM, unit])
        residual_scale = 1.0 / np.sqrt(2.0 * self.config.num_hidden_layers)
        tensors: Tensors = {}
        for name, shape in self._shapes[unit].items():
            if name.endswith("_gain"):
                tensors[name] = np.ones(shape, dtype=np.float32)
            elif name.endswith("_bias"):
                tensors[name] = np.zeros(shape, dtype=np.float32)
            else:
                std = INIT_STD * (residual_scale if name.endswith("proj_weight") else 1.0)
                tensors[name] = (rng.standard_normal(shape) * std).astype(np.float32)
        return tensors

    def train_batch(self, step: int) -> Batch:
        return self._corpus.train_batch(self.seed, step, self.batch_size, self.sequence_length)

    def eval_batch(self, index: int) -> Batch:
        return self._corpus.eval_batch(
            self.seed, index, self.eval_batch_size, self.sequence_length
        )

    def forward_unit(self, unit: int, weights: Tensors, inputs: Any) -> tuple[Any, Any]:
        if unit == 0:
            tokens: Labels = inputs
            return nn.embed_forward(tokens, weights["wte"], weights["wpe"]), tokens
        if unit == self.num_units - 1:
            return nn.layer_norm_forward(inputs, weights["lnf_gain"], weights["lnf_bias"])
        return self._block_forward(weights, inputs)

    def head(
        self,
        outputs: Array,
        weights: Mapping[int, Tensors],
        targets: Labels,
        normalizer: int,
        need_grad: bool,
    ) -> HeadOutput:
        loss_sum, correct, grad, grad_wte = nn.tied_head_loss(
            outputs, weights[0]["wte"], targets, normalizer, need_grad
        )
        tied = {0: {"wte": grad_wte}} if grad_wte is not None else {}
        return HeadOutput(loss_sum, correct, targets.size, grad, tied)

    def backward_unit(
        self, unit: int, weights: Tensors, cache: Any, grad: Array
    ) -> tuple[Tensors, Array | None]:
        if unit == 0:
            wte, wpe = nn.embed_backward(grad, cache, weights["wte"].shape, weights["wpe"].shape)
            return {"wte": wte, "wpe": wpe}, None
        if unit == self.num_units - 1:
            grad_inputs, gain, bias = nn.layer_norm_backward(grad, cache)
            return {"lnf_gain": gain, "lnf_bias": bias}, grad_inputs
        return self._block_backward(weights, cache, grad)

    def _block_forward(self, w: Tensors, x: Array) -> tuple[Array, Any]:
        normed1, ln1 = nn.layer_norm_forward(x, w["ln1_gain"], w["ln1_bias"])
        attended, attention = nn.attention_forward(
            normed1, w["attn_qkv_weight"], w["attn_qkv_bias"], self.config.num_heads
        )
        x = x + nn.linear_forward(attended, w["attn_proj_weight"], w["attn_proj_bias"])
        normed2, ln2 = nn.layer_norm_forward(x, w["ln2_gain"], w["ln2_bias"])
        inner = nn.linear_forward(normed2, w["mlp_fc_weight"], w["mlp_fc_bias"])
        activated, gelu = nn.gelu_forward(inner)
        out = x + nn.linear_forward(activated, w["mlp_proj_weight"], w["mlp_proj_bias"])
        return out, (ln1, attention, attended, ln2, normed2, gelu, activated)

    def _block_backward(self, w: Tensors, cache: Any, grad: Array) -> tuple[Tensors, Array]:
        ln1, attention, attended, ln2, normed2, gelu, activated = cache
        g: Tensors = {}
        grad_act, g["mlp_proj_weight"], g["mlp_proj_bias"] = nn.linear_backward(
            grad, activated, w["mlp_proj_weight"]
        )
        grad_inner = nn.gelu_backward(grad_act, gelu)
        grad_normed2, g["mlp_fc_weight"], g["mlp_fc_bias"] = nn.linear_backward(
            grad_inner, normed2, w["mlp_fc_weight"]
        )
        grad_mid, g["ln2_gain"], g["ln2_bias"] = nn.layer_norm_backward(grad_normed2, ln2)
        grad_mid = grad_mid + grad
        grad_attended, g["attn_proj_weight"], g["attn_proj_bias"] = nn.linear_backward(
            grad_mid, attended, w["attn_proj_weight"]
        )
        grad_normed1, g["attn_qkv_weight"], g["attn_qkv_bias"] = nn.attention_backward(
            grad_attended, attention
        )
        grad_x, g["ln1_gain"], g["ln1_bias"] = nn.layer_norm_backward(grad_normed1, ln1)
        ordered = {name: g[name] for name in self._shapes[1]}
        return ordered, grad_x + grad_mid
