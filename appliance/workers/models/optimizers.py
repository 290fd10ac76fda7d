"""Weight updates as MemoryX applies them: SGD (with momentum), AdamW, lr schedule, clipping.

All arithmetic on tensors is float32 with float32 scalars, in a fixed order, so the same inputs
give the same bits in MemoryX and in the single-process reference.

- SGD: buf = momentum * buf + g; p -= lr * buf (no state when momentum is 0).
- AdamW (and "adam", the same with weight_decay 0 by default): bias-corrected moments at
  t = step + 1; p -= lr * m_hat / (sqrt(v_hat) + eps).
- Weight decay is decoupled (p -= lr * weight_decay * p, before the gradient step) and applies to
  matrices only (ndim >= 2), never to biases, LayerNorm gains or other vectors.
- Learning rate of step k: linear warm-up over `warmup_steps` (lr * (k + 1) / warmup), then
  `decay` (constant, linear or cosine) from lr to min_learning_rate over `decay_steps` (default:
  the rest of the job), then min_learning_rate. Or, when `learning_rate` is the Model Zoo's list
  of schedulers, the scheduler whose steps hold k, at t = k - (the steps before it), of T =
  its total_iters: linear a + (b - a) * min(t / T, 1); cosine b + (a - b) * (1 + cos(pi *
  min(t / T, 1))) / 2; exponential a * rate ** (t / T) (floor(t / T) with staircase); constant
  its learning_rate. The last scheduler runs to the end of the job (T: the rest of it).
- Clipping by global norm: the gradient of every unit is multiplied by
  max_norm / max(norm, max_norm), norm being the L2 norm over all units of the summed gradient.
  Per-unit squared norms are float64 sums over the unit's tensors in name order; the global
  squared norm adds them in unit order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from appliance.domain.params import LrScheduler, OptimizerSection
from appliance.workers.models.model import Tensors

OptimizerState = dict[str, Tensors]  # slot ("momentum", "exp_avg", ...) -> tensor -> array


def state_slots(settings: OptimizerSection) -> tuple[str, ...]:
    """Names of the per-tensor state the optimizer keeps."""
    if settings.optimizer_type == "sgd":
        return ("momentum",) if settings.momentum > 0 else ()
    return ("exp_avg", "exp_avg_sq")


def initial_state(settings: OptimizerSection, weights: Tensors) -> OptimizerState:
    """Zeroed state for every slot and tensor."""
    return {
        slot: {name: np.zeros_like(array) for name, array in weights.items()}
        for slot in state_slots(settings)
    }


def learning_rate_at(settings: OptimizerSection, step: int, num_steps: int) -> float:
    """The learning rate used by the update of step `step` (0-based) of a `num_steps` job."""
    if isinstance(settings.learning_rate, tuple):
        return _scheduled_rate(settings.learning_rate, step, num_steps)
    peak, warmup = settings.learning_rate, settings.warmup_steps
    if step < warmup:
        return peak * (step + 1) / warmup
    if settings.decay == "constant":
        return peak
    span = settings.decay_steps or max(num_steps - warmup, 1)
    done = min((step - warmup) / span, 1.0)
    low = settings.min_learning_rate
    if settings.decay == "linear":
        return low + (peak - low) * (1.0 - done)
    return low + (peak - low) * 0.5 * (1.0 + math.cos(math.pi * done))


def _scheduled_rate(schedulers: Sequence[LrScheduler], step: int, num_steps: int) -> float:
    start = 0
    for index, phase in enumerate(schedulers):
        last = index == len(schedulers) - 1
        span = phase.total_iters or max(num_steps - start, 1)
        if step < start + span or last:
            return _phase_rate(phase, step - start, span)
        start += span
    raise AssertionError("a schedule has at least one scheduler")  # pragma: no cover


def _phase_rate(phase: LrScheduler, t: int, span: int) -> float:
    a, b = phase.initial_learning_rate, phase.end_learning_rate
    done = min(t / span, 1.0)
    if phase.scheduler == "constant":
        return phase.learning_rate
    if phase.scheduler == "linear":
        return a + (b - a) * done
    if phase.scheduler == "cosine":
        return b + (a - b) * 0.5 * (1.0 + math.cos(math.pi * done))
    exponent = math.floor(t / span) if phase.staircase else t / span
    return float(a * phase.decay_rate**exponent)


def squared_norm(tensors: Tensors) -> float:
    """Sum of squares of every tensor, in float64, tensors in name order."""
    total = 0.0
    for name in sorted(tensors):
        flat = tensors[name].astype(np.float64).ravel()
        total += float(flat @ flat)
    return total


def clip_scale(unit_squared_norms: Sequence[float], max_norm: float | None) -> float:
    """The factor applied to every gradient: 1 unless the global norm exceeds max_norm."""
    if max_norm is None:
        return 1.0
    norm = math.sqrt(math.fsum(unit_squared_norms)) if unit_squared_norms else 0.0
    return 1.0 if norm <= max_norm else max_norm / norm


def apply_update(
    settings: OptimizerSection,
    weights: Tensors,
    grads: Tensors,
    state: OptimizerState,
    step: int,
    learning_rate: float,
    grad_scale: float = 1.0,
) -> None:
    """Update `weights` and `state` in place (their arrays are replaced, never shared)."""
    lr = np.float32(learning_rate)
    decay = np.float32(learning_rate * settings.weight_decay)
    for name in weights:
        param = weights[name]
        grad = grads[name] if grad_scale == 1.0 else grads[name] * np.float32(grad_scale)
        if decay and param.ndim >= 2:
            param = param - decay * param
        if settings.optimizer_type == "sgd":
            if settings.momentum > 0:
                buffer = np.float32(settings.momentum) * state["momentum"][name] + grad
                state["momentum"][name] = buffer
                grad = buffer
            weights[name] = (param - lr * grad).astype(np.float32)
            continue
        beta1, beta2 = np.float32(settings.beta1), np.float32(settings.beta2)
        exp_avg = beta1 * state["exp_avg"][name] + (np.float32(1) - beta1) * grad
        exp_avg_sq = beta2 * state["exp_avg_sq"][name] + (np.float32(1) - beta2) * grad * grad
        state["exp_avg"][name], state["exp_avg_sq"][name] = exp_avg, exp_avg_sq
        t = step + 1
        correction1 = np.float32(1.0 - settings.beta1**t)
        correction2 = np.float32(1.0 - settings.beta2**t)
        denominator = np.sqrt(exp_avg_sq / correction2) + np.float32(settings.eps)
        weights[name] = (param - lr * (exp_avg / correction1) / denominator).astype(np.float32)
