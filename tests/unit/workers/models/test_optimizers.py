"""Optimizers, schedules and clipping against plain NumPy formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest

from appliance.domain.params import OptimizerSection, parse_params
from appliance.workers.models import optimizers

RNG = np.random.default_rng(1)


def tensors() -> dict[str, np.ndarray]:
    return {
        "weight": RNG.normal(size=(3, 4)).astype(np.float32),
        "bias": RNG.normal(size=4).astype(np.float32),
    }


def test_sgd_with_momentum_follows_the_heavy_ball_formula() -> None:
    settings = OptimizerSection(optimizer_type="sgd", learning_rate=0.1, momentum=0.9)
    weights, grads = tensors(), [tensors(), tensors()]
    state = optimizers.initial_state(settings, weights)
    expected, buffer = weights["weight"].astype(np.float64), np.zeros((3, 4))
    for step, grad in enumerate(grads):
        optimizers.apply_update(settings, weights, grad, state, step, 0.1)
        buffer = 0.9 * buffer + grad["weight"]
        expected = expected - 0.1 * buffer
    np.testing.assert_allclose(weights["weight"], expected, rtol=1e-6)
    assert weights["weight"].dtype == np.float32


def test_adamw_decays_matrices_only_and_corrects_bias() -> None:
    settings = OptimizerSection(optimizer_type="adamw", weight_decay=0.5, eps=1e-8)
    weights, grad = tensors(), tensors()
    before = {k: v.astype(np.float64) for k, v in weights.items()}
    state = optimizers.initial_state(settings, weights)
    optimizers.apply_update(settings, weights, grad, state, 0, 0.01)
    # First step: m_hat = g, v_hat = g^2, so the step is lr * sign(g) (up to eps).
    step = 0.01 * np.sign(grad["weight"])
    np.testing.assert_allclose(weights["weight"], before["weight"] * 0.995 - step, rtol=1e-5)
    np.testing.assert_allclose(
        weights["bias"], before["bias"] - 0.01 * np.sign(grad["bias"]), rtol=1e-5
    )
    assert set(state) == {"exp_avg", "exp_avg_sq"}


@pytest.mark.parametrize(
    ("decay", "expected"),
    [
        ("constant", [0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 1.0]),
        ("linear", [0.25, 0.5, 0.75, 1.0, 1.0, 0.75, 0.5]),
        ("cosine", [0.25, 0.5, 0.75, 1.0, 1.0, (1 + math.cos(math.pi / 4)) / 2, 0.5]),
    ],
)
def test_warmup_then_decay(decay: str, expected: list[float]) -> None:
    settings = OptimizerSection(learning_rate=1.0, warmup_steps=4, decay=decay)  # type: ignore[arg-type]
    rates = [optimizers.learning_rate_at(settings, step, num_steps=8) for step in range(7)]
    assert rates == pytest.approx(expected, abs=1e-6)


def test_the_model_zoos_list_of_schedulers_runs_one_after_the_other() -> None:
    settings = parse_params({"model": {}, "optimizer": {"learning_rate": [
        {"scheduler": "Linear", "initial_learning_rate": 0.0, "end_learning_rate": 1.0,
         "total_iters": 4},
        {"scheduler": "ConstantLR", "learning_rate": 0.5, "total_iters": 2},
        {"scheduler": "CosineDecay", "initial_learning_rate": 1.0, "end_learning_rate": 0.0,
         "total_iters": 4},
        {"scheduler": "Exponential", "initial_learning_rate": 0.8, "decay_rate": 0.5,
         "total_iters": 2, "staircase": True},
    ]}}).optimizer  # fmt: skip

    rates = [optimizers.learning_rate_at(settings, step, num_steps=16) for step in range(16)]

    cosine = [(1 + math.cos(math.pi * t / 4)) / 2 for t in range(4)]
    assert rates == pytest.approx(
        [0.0, 0.25, 0.5, 0.75, 0.5, 0.5, *cosine, 0.8, 0.8, 0.4, 0.4, 0.2, 0.2], abs=1e-12
    )


def test_the_last_scheduler_spans_the_rest_of_the_job_and_holds_its_end() -> None:
    settings = parse_params({"model": {}, "optimizer": {"learning_rate": [
        {"scheduler": "linear", "initial_learning_rate": 1.0, "end_learning_rate": 0.0},
    ]}}).optimizer  # fmt: skip
    assert [optimizers.learning_rate_at(settings, s, num_steps=4) for s in range(5)] == [
        1.0, 0.75, 0.5, 0.25, 0.0,
    ]  # fmt: skip
    held = parse_params({"model": {}, "optimizer": {"learning_rate": [
        {"scheduler": "linear", "initial_learning_rate": 1.0, "end_learning_rate": 0.0,
         "total_iters": 2},
    ]}}).optimizer  # fmt: skip
    assert optimizers.learning_rate_at(held, 5, num_steps=8) == 0.0


def test_clip_scale_uses_the_global_norm() -> None:
    grads = [tensors(), tensors()]
    norms = [optimizers.squared_norm(g) for g in grads]
    flat = np.concatenate([a.astype(np.float64).ravel() for g in grads for a in g.values()])
    global_norm = float(np.linalg.norm(flat))
    assert optimizers.clip_scale(norms, global_norm / 10) == pytest.approx(0.1)
    assert optimizers.clip_scale(norms, global_norm * 2) == 1.0
    assert optimizers.clip_scale(norms, None) == 1.0
    settings = OptimizerSection(learning_rate=1.0)
    weights = {k: np.zeros_like(v) for k, v in grads[0].items()}
    scale = optimizers.clip_scale(norms, 1e-3)
    optimizers.apply_update(settings, weights, grads[0], {}, 0, 1.0, scale)
    np.testing.assert_allclose(
        weights["weight"], -grads[0]["weight"] * 1e-3 / global_norm, rtol=1e-5
    )
