"""The fc_mnist MLP in plain NumPy: data, init, per-layer forward/backward, loss; `FcMnist` is
its streamed model (one unit per dense layer, tensors "weight" and "bias").

No transport here, so the numerics can be tested directly. Everything is float32 and
deterministic from the seed: the global batch of step k and the initial weights of layer l are
the same whichever replica computes them, which is what makes a job on N CS-2s end with the same
weights as on one (up to floating-point summation order).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from appliance.domain.model_shapes import fc_layer_shapes
from appliance.domain.params import DEFAULT_EVAL_BATCHES, FcMnistModel, Params, parse_params
from appliance.workers.models.model import Array, Batch, HeadOutput, Labels, Tensors

__all__ = ["Array", "FcMnist", "Labels", "TrainingConfig", "training_config"]

# Distinct streams of the seed sequence, so data, teacher and init never share random numbers.
_TEACHER_STREAM = 0
_BATCH_STREAM = 1
_INIT_STREAM = 2
_EVAL_STREAM = 3


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    """What the replicas need from the params YAML."""

    layer_shapes: tuple[tuple[int, int], ...]
    batch_size: int
    seed: int
    learning_rate: float

    @property
    def num_layers(self) -> int:
        return len(self.layer_shapes)

    @property
    def input_size(self) -> int:
        return self.layer_shapes[0][0]

    @property
    def num_classes(self) -> int:
        return self.layer_shapes[-1][1]


def training_config(params: Mapping[str, Any] | Params) -> TrainingConfig:
    """Model shapes, batch size, seed and learning rate (with defaults) of fc_mnist params.

    Raises InvalidSpec for params that do not validate or describe another model.
    """
    typed = params if isinstance(params, Params) else parse_params({"model": {}, **params})
    if not isinstance(typed.model, FcMnistModel):
        raise ValueError(f"params describe {typed.model.name}, not fc_mnist")
    return TrainingConfig(
        layer_shapes=tuple(fc_layer_shapes(typed.model)),
        batch_size=typed.train_input.batch_size,
        seed=typed.runconfig.seed,
        learning_rate=typed.optimizer.initial_learning_rate,
    )


def init_layer(seed: int, layer: int, fan_in: int, fan_out: int) -> tuple[Array, Array]:
    """He-initialised weight (fan_in, fan_out) and zero bias of one layer."""
    rng = np.random.default_rng([seed, _INIT_STREAM, layer])
    weight = rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)
    return weight.astype(np.float32), np.zeros(fan_out, dtype=np.float32)


def global_batch(
    config: TrainingConfig, step: int, stream: int = _BATCH_STREAM, size: int | None = None
) -> tuple[Array, Labels]:
    """Inputs ~ N(0, 1) and labels from a fixed random linear teacher, for step `step`."""
    teacher_rng = np.random.default_rng([config.seed, _TEACHER_STREAM])
    teacher = teacher_rng.standard_normal((config.input_size, config.num_classes))
    rng = np.random.default_rng([config.seed, stream, step])
    inputs = rng.standard_normal((size or config.batch_size, config.input_size))
    labels = np.argmax(inputs @ teacher, axis=1).astype(np.int64)
    return inputs.astype(np.float32), labels


def batch_shard(inputs: Array, labels: Labels, index: int, count: int) -> tuple[Array, Labels]:
    """The rows of the global batch that CS-2 `index` of `count` trains on (array_split)."""
    bounds = np.array_split(np.arange(len(labels)), count)[index]
    start, stop = (int(bounds[0]), int(bounds[-1]) + 1) if len(bounds) else (0, 0)
    return inputs[start:stop], labels[start:stop]


def dense_forward(inputs: Array, weight: Array, bias: Array, relu: bool) -> Array:
    """One dense layer, followed by ReLU unless it is the last layer."""
    outputs = inputs @ weight + bias
    return np.maximum(outputs, 0.0) if relu else outputs


def dense_backward(
    inputs: Array,
    weight: Array,
    outputs: Array,
    grad_outputs: Array,
    relu: bool,
    need_inputs: bool = True,
) -> tuple[Array, Array, Array | None]:
    """Gradients (weight, bias, inputs) of one layer, given the gradient at its outputs. The
    first layer's input gradient is nobody's (`need_inputs` False): None, not computed."""
    grad_pre = grad_outputs * (outputs > 0) if relu else grad_outputs
    grad_weight = inputs.T @ grad_pre
    grad_bias = grad_pre.sum(axis=0)
    grad_inputs = (grad_pre @ weight.T).astype(np.float32, copy=False) if need_inputs else None
    return (
        grad_weight.astype(np.float32, copy=False),
        grad_bias.astype(np.float32, copy=False),
        grad_inputs,
    )


def softmax_cross_entropy(logits: Array, labels: Labels, normalizer: int) -> tuple[float, Array]:
    """Sum of per-sample losses, and the gradient of (that sum / normalizer) w.r.t. logits.

    With `normalizer` the global batch size, the shards' gradients add up to the gradient of the
    mean loss over the global batch.
    """
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    rows = np.arange(len(labels))
    loss_sum = float(-log_probs[rows, labels].sum(dtype=np.float64))
    grad = np.exp(log_probs)
    grad[rows, labels] -= 1.0
    return loss_sum, (grad / normalizer).astype(np.float32)


def sgd_update(param: Array, grad: Array, learning_rate: float) -> Array:
    """Plain SGD: param - learning_rate * grad, kept in float32."""
    return (param - np.float32(learning_rate) * grad).astype(np.float32)


class FcMnist:
    """The streamed fc_mnist model of one job's params."""

    def __init__(self, params: Params) -> None:
        self.config = training_config(params)
        self.eval_batch_size = params.eval_input.batch_size
        self.num_eval_batches = params.eval_input.num_batches or DEFAULT_EVAL_BATCHES

    @property
    def num_units(self) -> int:
        return self.config.num_layers

    @property
    def batch_size(self) -> int:
        return self.config.batch_size

    @property
    def predictions_per_sample(self) -> int:
        return 1

    @property
    def head_units(self) -> tuple[int, ...]:
        return ()

    def unit_shapes(self, unit: int) -> dict[str, tuple[int, ...]]:
        fan_in, fan_out = self.config.layer_shapes[unit]
        return {"weight": (fan_in, fan_out), "bias": (fan_out,)}

    def init_unit(self, unit: int) -> Tensors:
        weight, bias = init_layer(self.config.seed, unit, *self.config.layer_shapes[unit])
        return {"weight": weight, "bias": bias}

    def train_batch(self, step: int) -> Batch:
        return Batch(*global_batch(self.config, step))

    def eval_batch(self, index: int) -> Batch:
        return Batch(*global_batch(self.config, index, _EVAL_STREAM, self.eval_batch_size))

    def forward_unit(self, unit: int, weights: Tensors, inputs: Any) -> tuple[Any, Any]:
        relu = unit < self.num_units - 1
        outputs = dense_forward(inputs, weights["weight"], weights["bias"], relu)
        return outputs, (inputs, outputs)

    def head(
        self,
        outputs: Array,
        weights: Mapping[int, Tensors],
        targets: Labels,
        normalizer: int,
        need_grad: bool,
    ) -> HeadOutput:
        loss_sum, grad = softmax_cross_entropy(outputs, targets, normalizer)
        correct = int((outputs.argmax(axis=1) == targets).sum())
        return HeadOutput(loss_sum, correct, len(targets), grad if need_grad else None)

    def backward_unit(
        self, unit: int, weights: Tensors, cache: Any, grad: Array
    ) -> tuple[Tensors, Array | None]:
        inputs, outputs = cache
        relu = unit < self.num_units - 1
        grad_weight, grad_bias, grad_inputs = dense_backward(
            inputs, weights["weight"], outputs, grad, relu, need_inputs=unit > 0
        )
        return {"weight": grad_weight, "bias": grad_bias}, grad_inputs
