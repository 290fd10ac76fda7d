"""What a streamed model is: units (layers) of named tensors, run one unit at a time.

A CS-2 runs `forward_unit` for units 0..U-1 as each unit's weights stream in, then `head` (loss,
and the gradient at the last unit's outputs), then `backward_unit` for units U-1..0, pushing each
unit's gradient as soon as it is complete. The single-process reference trainer calls the same
functions in the same order, so one CS-2 reproduces it bit for bit (under the rules of
appliance.workers.models.numerics: aligned arrays, one BLAS thread).

Gradients are those of (sum of the shard's per-prediction losses) / `normalizer`, the number of
predictions in the global batch, so the shards' gradients add up to the gradient of the mean.
A head may use another unit's tensors (a tied LM head uses the token embedding): it returns their
gradient contributions in `HeadOutput.tied_grads`, and `backward_units` adds them to that unit's
gradient before yielding it, so a tied unit is only emitted once its gradient is complete.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float32]
Labels = npt.NDArray[np.int64]
Tensors = dict[str, Array]


@dataclasses.dataclass(frozen=True)
class Batch:
    """Inputs (features or token ids) and targets; rows are samples (or sequences)."""

    inputs: npt.NDArray[Any]
    targets: Labels

    @property
    def num_samples(self) -> int:
        return len(self.targets)

    def shard(self, index: int, count: int) -> Batch:
        """The rows CS-2 `index` of `count` trains on (contiguous, as np.array_split)."""
        bounds = np.array_split(np.arange(self.num_samples), count)[index]
        start, stop = (int(bounds[0]), int(bounds[-1]) + 1) if len(bounds) else (0, 0)
        return Batch(self.inputs[start:stop], self.targets[start:stop])


@dataclasses.dataclass(frozen=True)
class HeadOutput:
    """Loss over the shard, and the gradient flowing back into the last unit."""

    loss_sum: float
    num_correct: int
    num_predictions: int
    grad: Array | None
    tied_grads: dict[int, Tensors] = dataclasses.field(default_factory=dict)


class StreamedModel(Protocol):
    """A model the data plane can stream; all arrays float32 (float64 in gradient checks)."""

    @property
    def num_units(self) -> int:
        """How many streamed units (layers) the model has."""

    @property
    def batch_size(self) -> int:
        """Samples in the global training batch."""

    @property
    def predictions_per_sample(self) -> int:
        """Loss terms per sample: 1 for a classifier, the sequence length for a LM."""

    @property
    def head_units(self) -> tuple[int, ...]:
        """Units whose tensors the head reads (a tied LM head reads the embeddings)."""

    def unit_shapes(self, unit: int) -> dict[str, tuple[int, ...]]:
        """Shapes of the unit's tensors."""

    def init_unit(self, unit: int) -> Tensors:
        """The unit's initial weights, deterministic from the seed."""

    def train_batch(self, step: int) -> Batch:
        """The global training batch of step `step`, deterministic from seed and step."""

    def eval_batch(self, index: int) -> Batch:
        """Evaluation batch `index`, the same for every evaluation."""

    @property
    def num_eval_batches(self) -> int:
        """How many batches one evaluation covers."""

    def forward_unit(self, unit: int, weights: Tensors, inputs: Any) -> tuple[Any, Any]:
        """The unit's outputs and what its backward pass needs."""

    def head(
        self,
        outputs: Array,
        weights: Mapping[int, Tensors],
        targets: Labels,
        normalizer: int,
        need_grad: bool,
    ) -> HeadOutput:
        """Loss (and its gradient) from the last unit's outputs."""

    def backward_unit(
        self, unit: int, weights: Tensors, cache: Any, grad: Array
    ) -> tuple[Tensors, Array | None]:
        """Gradients of the unit's tensors and of its inputs (None for the first unit)."""


def forward_units(
    model: StreamedModel, weights: Mapping[int, Tensors], inputs: Any
) -> tuple[Array, list[Any]]:
    """All units in order over in-memory weights; returns the last outputs and the caches."""
    caches: list[Any] = []
    outputs = inputs
    for unit in range(model.num_units):
        outputs, cache = model.forward_unit(unit, weights[unit], outputs)
        caches.append(cache)
    result: Array = outputs
    return result, caches


def backward_units(
    model: StreamedModel, weights: Mapping[int, Tensors], caches: list[Any], head: HeadOutput
) -> Iterator[tuple[int, Tensors]]:
    """Yield (unit, complete gradient) from the last unit to the first."""
    grad = head.grad
    for unit in reversed(range(model.num_units)):
        grads, grad = backward_one(model, unit, weights[unit], caches[unit], grad, head)
        yield unit, grads


def backward_one(
    model: StreamedModel,
    unit: int,
    weights: Tensors,
    cache: Any,
    grad: Array | None,
    head: HeadOutput,
) -> tuple[Tensors, Array | None]:
    """One unit's complete gradient (its own part, then the head's for a tied unit) and the
    gradient at its inputs (None for the first unit)."""
    assert grad is not None, "the head computed no gradient"
    grads, grad_inputs = model.backward_unit(unit, weights, cache, grad)
    for name, extra in head.tied_grads.get(unit, {}).items():
        grads[name] = grads[name] + extra  # the unit's own part first, then the head's
    return grads, grad_inputs
