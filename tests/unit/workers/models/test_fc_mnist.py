"""fc_mnist numerics: shapes, determinism, sharding, gradients against finite differences."""

from __future__ import annotations

import numpy as np
import pytest

from appliance.domain.errors import InvalidSpec
from appliance.domain.params import parse_params
from appliance.workers.models import fc_mnist
from appliance.workers.models.reference import ReferenceTrainer

SMALL = {
    "model": {"input_size": 6, "hidden_sizes": [5, 4], "num_classes": 3},
    "train_input": {"batch_size": 7},
    "runconfig": {"seed": 3},
    "optimizer": {"learning_rate": 0.1},
}


def test_training_config_defaults() -> None:
    config = fc_mnist.training_config({})
    assert config.layer_shapes == ((784, 256), (256, 256), (256, 10))
    assert (config.batch_size, config.seed, config.learning_rate) == (32, 0, 0.01)


def test_training_config_rejects_empty_batch() -> None:
    with pytest.raises(InvalidSpec, match=r"train_input\.batch_size must be > 0"):
        fc_mnist.training_config({"train_input": {"batch_size": 0}})


def test_batch_and_init_are_deterministic_float32() -> None:
    config = fc_mnist.training_config(SMALL)
    inputs, labels = fc_mnist.global_batch(config, step=4)
    again, labels_again = fc_mnist.global_batch(config, step=4)
    other, _ = fc_mnist.global_batch(config, step=5)
    assert inputs.dtype == np.float32 and inputs.shape == (7, 6)
    np.testing.assert_array_equal(inputs, again)
    np.testing.assert_array_equal(labels, labels_again)
    assert not np.array_equal(inputs, other)
    weight, bias = fc_mnist.init_layer(3, 1, 5, 4)
    np.testing.assert_array_equal(weight, fc_mnist.init_layer(3, 1, 5, 4)[0])
    assert weight.dtype == np.float32 and weight.shape == (5, 4) and not bias.any()


@pytest.mark.parametrize("count", [1, 2, 3, 4, 9])
def test_shards_cover_the_batch_in_order(count: int) -> None:
    config = fc_mnist.training_config(SMALL)
    inputs, labels = fc_mnist.global_batch(config, step=0)
    shards = [fc_mnist.batch_shard(inputs, labels, i, count) for i in range(count)]
    np.testing.assert_array_equal(np.concatenate([s[0] for s in shards]), inputs)
    np.testing.assert_array_equal(np.concatenate([s[1] for s in shards]), labels)


def _mean_loss(
    layers: list[tuple[np.ndarray, np.ndarray]], inputs: np.ndarray, labels: np.ndarray
) -> float:
    activations = inputs.astype(np.float64)
    for i, (weight, bias) in enumerate(layers):
        activations = activations @ weight + bias
        if i < len(layers) - 1:
            activations = np.maximum(activations, 0.0)
    shifted = activations - activations.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float(-log_probs[np.arange(len(labels)), labels].mean())


def test_backward_matches_finite_differences() -> None:
    config = fc_mnist.training_config(SMALL)
    inputs, labels = fc_mnist.global_batch(config, step=0)
    layers = [fc_mnist.init_layer(1, i, *shape) for i, shape in enumerate(config.layer_shapes)]
    last = config.num_layers - 1
    activations = [inputs]
    for i, (weight, bias) in enumerate(layers):
        activations.append(fc_mnist.dense_forward(activations[-1], weight, bias, relu=i < last))
    _, grad = fc_mnist.softmax_cross_entropy(activations[-1], labels, len(labels))
    analytic: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for i in reversed(range(config.num_layers)):
        grad_w, grad_b, grad = fc_mnist.dense_backward(
            activations[i], layers[i][0], activations[i + 1], grad, relu=i < last
        )
        analytic[i] = (grad_w, grad_b)

    reference = [(w.astype(np.float64), b.astype(np.float64)) for w, b in layers]
    eps = 1e-6
    for i in range(config.num_layers):
        for which in (0, 1):
            numeric = np.zeros_like(reference[i][which])
            for index in np.ndindex(numeric.shape):
                plus = [(w.copy(), b.copy()) for w, b in reference]
                minus = [(w.copy(), b.copy()) for w, b in reference]
                plus[i][which][index] += eps
                minus[i][which][index] -= eps
                numeric[index] = (
                    _mean_loss(plus, inputs, labels) - _mean_loss(minus, inputs, labels)
                ) / (2 * eps)
            np.testing.assert_allclose(analytic[i][which], numeric, rtol=1e-3, atol=1e-5)


def test_shard_gradients_add_up_to_the_global_gradient() -> None:
    config = fc_mnist.training_config(SMALL)
    inputs, labels = fc_mnist.global_batch(config, step=2)
    weight, bias = fc_mnist.init_layer(0, 0, 6, 3)

    def last_layer_grad(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        logits = fc_mnist.dense_forward(x, weight, bias, relu=False)
        _, grad = fc_mnist.softmax_cross_entropy(logits, y, config.batch_size)
        return fc_mnist.dense_backward(x, weight, logits, grad, relu=False)[0]

    whole = last_layer_grad(inputs, labels)
    parts = [last_layer_grad(*fc_mnist.batch_shard(inputs, labels, i, 3)) for i in range(3)]
    np.testing.assert_allclose(sum(parts), whole, rtol=1e-5, atol=1e-7)


def test_reference_training_lowers_the_loss() -> None:
    params = parse_params(
        {**SMALL, "train_input": {"batch_size": 64}, "optimizer": {"learning_rate": 0.5}}
    )
    losses = ReferenceTrainer(params, num_steps=60).train()
    assert np.mean(losses[-10:]) < 0.8 * np.mean(losses[:10])
