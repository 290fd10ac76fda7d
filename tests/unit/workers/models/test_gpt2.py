"""GPT-2 numerics: every backward pass against central finite differences in float64."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from appliance.domain.params import parse_params
from appliance.workers.models import gpt2_layers as nn
from appliance.workers.models.gpt2 import Gpt2
from appliance.workers.models.model import backward_units, forward_units
from appliance.workers.models.reference import ReferenceTrainer
from appliance.workers.models.text_corpus import decode, encode, load_corpus

TINY = {
    "model": {
        "name": "gpt2",
        "hidden_size": 8,
        "num_hidden_layers": 2,
        "num_heads": 2,
        "max_position_embeddings": 6,
    },
    "train_input": {"batch_size": 3, "max_sequence_length": 5},
    "runconfig": {"seed": 4},
}
RNG = np.random.default_rng(0)


def numeric_grad(loss: Callable[[], float], array: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """d loss / d array by central differences, perturbing `array` in place."""
    grad = np.zeros_like(array)
    for index in np.ndindex(array.shape):
        saved = array[index]
        array[index] = saved + eps
        plus = loss()
        array[index] = saved - eps
        minus = loss()
        array[index] = saved
        grad[index] = (plus - minus) / (2 * eps)
    return grad


def check(analytic: np.ndarray, loss: Callable[[], float], array: np.ndarray) -> None:
    np.testing.assert_allclose(analytic, numeric_grad(loss, array), rtol=1e-5, atol=1e-8)


def test_layer_norm() -> None:
    x, gain, bias = RNG.normal(size=(2, 3, 5)), RNG.normal(size=5), RNG.normal(size=5)
    probe = RNG.normal(size=(2, 3, 5))

    def loss() -> float:
        return float((nn.layer_norm_forward(x, gain, bias)[0] * probe).sum())

    _, cache = nn.layer_norm_forward(x, gain, bias)
    grad_x, grad_gain, grad_bias = nn.layer_norm_backward(probe, cache)
    for analytic, array in ((grad_x, x), (grad_gain, gain), (grad_bias, bias)):
        check(analytic, loss, array)


def test_gelu() -> None:
    x, probe = RNG.normal(size=(4, 6)) * 2, RNG.normal(size=(4, 6))
    _, cache = nn.gelu_forward(x)
    check(nn.gelu_backward(probe, cache), lambda: float((nn.gelu_forward(x)[0] * probe).sum()), x)


def test_causal_attention() -> None:
    x, probe = RNG.normal(size=(2, 4, 6)), RNG.normal(size=(2, 4, 6))
    weight, bias = RNG.normal(size=(6, 18)) * 0.5, RNG.normal(size=18) * 0.1

    def loss() -> float:
        return float((nn.attention_forward(x, weight, bias, 3)[0] * probe).sum())

    _, cache = nn.attention_forward(x, weight, bias, 3)
    grad_x, grad_weight, grad_bias = nn.attention_backward(probe, cache)
    for analytic, array in ((grad_x, x), (grad_weight, weight), (grad_bias, bias)):
        check(analytic, loss, array)


def test_attention_is_causal() -> None:
    x = RNG.normal(size=(1, 5, 4))
    weight, bias = RNG.normal(size=(4, 12)), np.zeros(12)
    changed = x.copy()
    changed[0, 3:] += 1.0  # the future of position 2
    before = nn.attention_forward(x, weight, bias, 2)[0]
    after = nn.attention_forward(changed, weight, bias, 2)[0]
    np.testing.assert_array_equal(before[0, :3], after[0, :3])


def test_embeddings_and_tied_head() -> None:
    tokens = RNG.integers(0, 7, size=(2, 4))
    targets = RNG.integers(0, 7, size=(2, 4))
    wte, wpe = RNG.normal(size=(7, 5)), RNG.normal(size=(6, 5))

    def loss() -> float:
        hidden = nn.embed_forward(tokens, wte, wpe)
        return nn.tied_head_loss(hidden, wte, targets, 8, need_grad=False)[0] / 8

    hidden = nn.embed_forward(tokens, wte, wpe)
    _, _, grad_hidden, grad_wte_head = nn.tied_head_loss(hidden, wte, targets, 8, True)
    assert grad_hidden is not None and grad_wte_head is not None
    grad_wte, grad_wpe = nn.embed_backward(grad_hidden, tokens, wte.shape, wpe.shape)
    check(grad_wte + grad_wte_head, loss, wte)
    check(grad_wpe, loss, wpe)
    assert not grad_wpe[4:].any()  # positions past the sequence get no gradient


def _float64_model() -> tuple[Gpt2, dict[int, dict[str, np.ndarray]]]:
    model = Gpt2(parse_params(TINY))
    weights = {}
    for unit in range(model.num_units):
        weights[unit] = {}
        for name, array in model.init_unit(unit).items():
            noise = RNG.normal(size=array.shape) * 0.3  # away from the symmetric init
            weights[unit][name] = array.astype(np.float64) + noise
    return model, weights


@pytest.mark.parametrize("unit", [0, 1, 2, 3])
def test_whole_model_gradient_of_every_unit(unit: int) -> None:
    """Embeddings (with the tied head), both blocks and the final LayerNorm, end to end."""
    model, weights = _float64_model()
    batch = model.train_batch(0)
    normalizer = batch.targets.size

    def loss() -> float:
        outputs, _ = forward_units(model, weights, batch.inputs)
        head = model.head(outputs, weights, batch.targets, normalizer, need_grad=False)
        return head.loss_sum / normalizer

    outputs, caches = forward_units(model, weights, batch.inputs)
    head = model.head(outputs, weights, batch.targets, normalizer, need_grad=True)
    grads = dict(backward_units(model, weights, caches, head))
    assert list(grads) == [3, 2, 1, 0]
    assert set(grads[unit]) == set(weights[unit])
    for name, array in weights[unit].items():
        check(grads[unit][name], loss, array)


def test_tokenizer_and_deterministic_batches() -> None:
    assert decode(encode("weight streaming")) == "weight streaming"
    model = Gpt2(parse_params(TINY))
    first, again, other = model.train_batch(3), model.train_batch(3), model.train_batch(4)
    np.testing.assert_array_equal(first.inputs, again.inputs)
    assert not np.array_equal(first.inputs, other.inputs)
    np.testing.assert_array_equal(first.inputs[:, 1:], first.targets[:, :-1])
    corpus = load_corpus()
    assert len(corpus.train_tokens) + len(corpus.eval_tokens) > 50_000


def test_loss_on_the_shipped_corpus_falls() -> None:
    params = parse_params(
        {
            "model": {
                "name": "gpt2",
                "hidden_size": 32,
                "num_hidden_layers": 2,
                "num_heads": 2,
                "max_position_embeddings": 32,
            },
            "train_input": {"batch_size": 16},
            "optimizer": {
                "optimizer_type": "adamw",
                "learning_rate": 3e-3,
                "warmup_steps": 10,
                "decay": "cosine",
                "weight_decay": 0.01,
                "max_gradient_norm": 1.0,
            },
            "runconfig": {"seed": 0},
        }
    )
    trainer = ReferenceTrainer(params, num_steps=300)
    losses = trainer.train()
    evaluation = trainer.evaluate()
    print(
        f"gpt2 loss: first {losses[0]:.3f}, last-10 mean {np.mean(losses[-10:]):.3f}, "
        f"eval {evaluation.loss:.3f} (accuracy {evaluation.accuracy:.3f})"
    )
    assert losses[0] > 5.0
    assert np.mean(losses[-10:]) < 3.0
    assert evaluation.loss < 3.0


def test_a_vocabulary_larger_than_the_bytes_and_a_filter_size_train() -> None:
    """The Model Zoo's vocab_size and filter_size (#32): the embedding has rows no byte selects,
    the MLP the width asked for, and the gradients still check out."""
    params = parse_params({**TINY, "model": {**TINY["model"], "vocab_size": 300,
                                            "filter_size": 12}})  # fmt: skip
    model = Gpt2(params)
    assert model.unit_shapes(0)["wte"] == (300, 8)
    assert model.unit_shapes(1)["mlp_fc_weight"] == (8, 12)
    trainer = ReferenceTrainer(params, num_steps=3, model=model)
    losses = trainer.train()
    assert len(losses) == 3 and all(np.isfinite(losses))
    assert losses[0] == pytest.approx(np.log(300), rel=0.05)  # uniform over 300 ids at first
