"""The fc_mnist MLP in plain NumPy: data, init, per-layer forward/backward, loss, SGD.

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
import numpy.typing as npt

from appliance.domain.models import fc_layer_shapes

Array = npt.NDArray[np.float32]
Labels = npt.NDArray[np.int64]

# Distinct streams of the seed sequence, so data, teacher and init never share random numbers.
_TEACHER_STREAM = 0
_BATCH_STREAM = 1
_INIT_STREAM = 2


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


def training_config(params: Mapping[str, Any]) -> TrainingConfig:
    """Read model shapes, batch size, seed and learning rate (with defaults) from params."""
    model = params.get("model") or {}
    train_input = params.get("train_input") or {}
    optimizer = params.get("optimizer") or {}
    runconfig = params.get("runconfig") or {}
    batch_size = int(train_input.get("batch_size", 32))
    if batch_size <= 0:
        raise ValueError(f"train_input.batch_size must be positive, got {batch_size}")
    return TrainingConfig(
        layer_shapes=tuple(fc_layer_shapes(model)),
        batch_size=batch_size,
        seed=int(runconfig.get("seed", 0)),
        learning_rate=float(optimizer.get("learning_rate", 0.01)),
    )


def init_layer(seed: int, layer: int, fan_in: int, fan_out: int) -> tuple[Array, Array]:
    """He-initialised weight (fan_in, fan_out) and zero bias of one layer."""
    rng = np.random.default_rng([seed, _INIT_STREAM, layer])
    weight = rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)
    return weight.astype(np.float32), np.zeros(fan_out, dtype=np.float32)


def global_batch(config: TrainingConfig, step: int) -> tuple[Array, Labels]:
    """Inputs ~ N(0, 1) and labels from a fixed random linear teacher, for step `step`."""
    teacher_rng = np.random.default_rng([config.seed, _TEACHER_STREAM])
    teacher = teacher_rng.standard_normal((config.input_size, config.num_classes))
    rng = np.random.default_rng([config.seed, _BATCH_STREAM, step])
    inputs = rng.standard_normal((config.batch_size, config.input_size))
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
    inputs: Array, weight: Array, outputs: Array, grad_outputs: Array, relu: bool
) -> tuple[Array, Array, Array]:
    """Gradients (weight, bias, inputs) of one layer, given the gradient at its outputs."""
    grad_pre = grad_outputs * (outputs > 0) if relu else grad_outputs
    grad_weight = inputs.T @ grad_pre
    grad_bias = grad_pre.sum(axis=0)
    grad_inputs = grad_pre @ weight.T
    return (
        grad_weight.astype(np.float32),
        grad_bias.astype(np.float32),
        grad_inputs.astype(np.float32),
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


def train_reference(
    config: TrainingConfig, num_steps: int
) -> tuple[list[tuple[Array, Array]], list[float]]:
    """Train in one process (the numerics of one CS-2); returns final layers and mean losses."""
    layers = [init_layer(config.seed, i, *shape) for i, shape in enumerate(config.layer_shapes)]
    losses: list[float] = []
    last = config.num_layers - 1
    for step in range(num_steps):
        inputs, labels = global_batch(config, step)
        activations = [inputs]
        for i, (weight, bias) in enumerate(layers):
            activations.append(dense_forward(activations[-1], weight, bias, relu=i < last))
        loss_sum, grad = softmax_cross_entropy(activations[-1], labels, config.batch_size)
        losses.append(loss_sum / config.batch_size)
        for i in reversed(range(config.num_layers)):
            weight, bias = layers[i]
            grad_w, grad_b, grad = dense_backward(
                activations[i], weight, activations[i + 1], grad, relu=i < last
            )
            layers[i] = (
                sgd_update(weight, grad_w, config.learning_rate),
                sgd_update(bias, grad_b, config.learning_rate),
            )
    return layers, losses
