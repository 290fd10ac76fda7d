"""GPT-2 building blocks in NumPy with hand-written backward passes.

Every function keeps the dtype of its inputs (float32 in training, float64 in gradient checks):
constants are Python floats, which NumPy does not let widen an array's dtype. Activations are
(batch, time, hidden); matrices multiply on the right (x @ weight).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from appliance.workers.models.model import Array, Labels

LN_EPS = 1e-5
_GELU_C = math.sqrt(2.0 / math.pi)
Cache = tuple[Any, ...]


def layer_norm_forward(x: Array, gain: Array, bias: Array) -> tuple[Array, Cache]:
    """Normalise the last axis to zero mean and unit variance, then scale and shift."""
    centred = x - x.mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + LN_EPS)
    normed = centred * rstd
    return normed * gain + bias, (normed, rstd, gain)


def layer_norm_backward(grad: Array, cache: Cache) -> tuple[Array, Array, Array]:
    """Gradients (inputs, gain, bias)."""
    normed, rstd, gain = cache
    rows = grad.reshape(-1, grad.shape[-1])
    grad_gain = (rows * normed.reshape(rows.shape)).sum(axis=0)
    grad_bias = rows.sum(axis=0)
    grad_normed = grad * gain
    mean_grad = grad_normed.mean(axis=-1, keepdims=True)
    mean_dot = (grad_normed * normed).mean(axis=-1, keepdims=True)
    return rstd * (grad_normed - mean_grad - normed * mean_dot), grad_gain, grad_bias


def gelu_forward(x: Array) -> tuple[Array, Cache]:
    """GELU, tanh approximation (as GPT-2)."""
    tanh = np.tanh(_GELU_C * (x + 0.044715 * x * x * x))
    result: Array = (0.5 * x * (1.0 + tanh)).astype(x.dtype, copy=False)
    return result, (x, tanh)


def gelu_backward(grad: Array, cache: Cache) -> Array:
    x, tanh = cache
    slope = 0.5 * (1.0 + tanh) + 0.5 * x * (1.0 - tanh * tanh) * _GELU_C * (
        1.0 + 3 * 0.044715 * x * x
    )
    result: Array = grad * slope
    return result


def linear_forward(x: Array, weight: Array, bias: Array) -> Array:
    """x @ weight + bias over the last axis."""
    result: Array = x @ weight + bias
    return result


def linear_backward(grad: Array, x: Array, weight: Array) -> tuple[Array, Array, Array]:
    """Gradients (inputs, weight, bias) of a linear layer."""
    rows = grad.reshape(-1, grad.shape[-1])
    grad_weight = x.reshape(-1, x.shape[-1]).T @ rows
    return grad @ weight.T, grad_weight, rows.sum(axis=0)


def attention_forward(
    x: Array, qkv_weight: Array, qkv_bias: Array, num_heads: int
) -> tuple[Array, Cache]:
    """Causal multi-head self-attention before the output projection: (B, T, H) -> (B, T, H)."""
    batch, time, hidden = x.shape
    head_size = hidden // num_heads
    qkv = linear_forward(x, qkv_weight, qkv_bias).reshape(batch, time, 3, num_heads, head_size)
    query, key, value = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # (B, h, T, d)
    scores = (query @ key.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(head_size))
    future = np.triu(np.ones((time, time), dtype=bool), k=1)
    scores = np.where(future, -np.inf, scores)
    probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    merged = (probs @ value).transpose(0, 2, 1, 3).reshape(batch, time, hidden)
    return merged, (x, query, key, value, probs, qkv_weight)


def attention_backward(grad: Array, cache: Cache) -> tuple[Array, Array, Array]:
    """Gradients (inputs, qkv weight, qkv bias) of `attention_forward`."""
    x, query, key, value, probs, qkv_weight = cache
    batch, num_heads, time, head_size = query.shape
    grad_heads = grad.reshape(batch, time, num_heads, head_size).transpose(0, 2, 1, 3)
    grad_probs = grad_heads @ value.transpose(0, 1, 3, 2)
    grad_value = probs.transpose(0, 1, 3, 2) @ grad_heads
    grad_scores = probs * (grad_probs - (grad_probs * probs).sum(axis=-1, keepdims=True))
    grad_scores *= 1.0 / math.sqrt(head_size)
    grad_query = grad_scores @ key
    grad_key = grad_scores.transpose(0, 1, 3, 2) @ query
    grad_qkv = np.stack([grad_query, grad_key, grad_value], axis=2)  # (B, h, 3, T, d)
    grad_qkv = grad_qkv.transpose(0, 3, 2, 1, 4).reshape(batch, time, 3 * num_heads * head_size)
    grad_x, grad_weight, grad_bias = linear_backward(grad_qkv, x, qkv_weight)
    # The key bias adds q_i . b_k to every score of row i, which softmax ignores: its gradient is
    # exactly zero. Computed, it is rounding noise, which Adam would amplify into real updates
    # that differ with the summation order (number of CS-2s).
    hidden = num_heads * head_size
    grad_bias[hidden : 2 * hidden] = 0.0
    return grad_x, grad_weight, grad_bias


def embed_forward(tokens: Labels, wte: Array, wpe: Array) -> Array:
    """Token plus position embeddings: (B, T) ids -> (B, T, H)."""
    result: Array = wte[tokens] + wpe[: tokens.shape[1]]
    return result


def embed_backward(
    grad: Array, tokens: Labels, wte_shape: tuple[int, ...], wpe_shape: tuple[int, ...]
) -> tuple[Array, Array]:
    """Gradients (wte, wpe) of the lookups; rows of unseen tokens and positions are zero."""
    rows = grad.reshape(-1, grad.shape[-1])
    grad_wte = np.zeros(wte_shape, dtype=grad.dtype)
    np.add.at(grad_wte, tokens.reshape(-1), rows)  # in row order: deterministic
    grad_wpe = np.zeros(wpe_shape, dtype=grad.dtype)
    grad_wpe[: tokens.shape[1]] = grad.sum(axis=0)
    return grad_wte, grad_wpe


def tied_head_loss(
    hidden: Array, wte: Array, targets: Labels, normalizer: int, need_grad: bool
) -> tuple[float, int, Array | None, Array | None]:
    """Cross-entropy of logits = hidden @ wte.T against the next tokens.

    Returns (sum of losses, correct predictions, gradient at `hidden`, gradient of `wte`), the
    gradients being those of (sum / normalizer).
    """
    rows = hidden.reshape(-1, hidden.shape[-1])
    logits = rows @ wte.T
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    flat_targets = targets.reshape(-1)
    index = np.arange(len(flat_targets))
    loss_sum = float(-log_probs[index, flat_targets].sum(dtype=np.float64))
    correct = int((logits.argmax(axis=1) == flat_targets).sum())
    if not need_grad:
        return loss_sum, correct, None, None
    grad_logits = np.exp(log_probs)
    grad_logits[index, flat_targets] -= 1.0
    grad_logits *= 1.0 / normalizer
    grad_hidden = (grad_logits @ wte).reshape(hidden.shape)
    return loss_sum, correct, grad_hidden, grad_logits.T @ rows
