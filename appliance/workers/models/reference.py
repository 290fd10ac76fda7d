"""Single-process training with the data plane's numerics: the yardstick for the replicas.

Same model functions, same optimizer, same clipping and schedule, same order of operations, and
BLAS on one thread as in a replica, so a job on one CS-2 ends with these weights bit for bit, and
on N CS-2s up to the order in which shard gradients are summed (appliance.workers.models.numerics
says what is promised and why it holds). Also the baseline of bench/weight_streaming.py.
"""

from __future__ import annotations

import dataclasses

from appliance.domain.params import Params
from appliance.workers.models import optimizers
from appliance.workers.models.model import StreamedModel, Tensors, backward_units, forward_units
from appliance.workers.models.model_catalog import build_model
from appliance.workers.models.numerics import one_blas_thread


@dataclasses.dataclass(frozen=True)
class EvalResult:
    """Mean loss and accuracy over the evaluation batches."""

    loss: float
    accuracy: float


class ReferenceTrainer:
    """Weights and optimizer state of every unit, trained one global batch at a time."""

    def __init__(self, params: Params, num_steps: int, model: StreamedModel | None = None):
        self.params = params
        self.num_steps = num_steps
        self.model = model or build_model(params)
        self.weights = [self.model.init_unit(u) for u in range(self.model.num_units)]
        self.states = [optimizers.initial_state(params.optimizer, w) for w in self.weights]
        self.step = 0
        self.losses: list[float] = []
        self.learning_rates: list[float] = []

    def train_step(self) -> float:
        """Run step `self.step` and apply its update; returns the mean loss of the batch."""
        with one_blas_thread():
            return self._train_step()

    def _train_step(self) -> float:
        model, settings = self.model, self.params.optimizer
        batch = model.train_batch(self.step)
        normalizer = batch.num_samples * model.predictions_per_sample
        weights = dict(enumerate(self.weights))
        outputs, caches = forward_units(model, weights, batch.inputs)
        head = model.head(outputs, weights, batch.targets, normalizer, need_grad=True)
        grads: dict[int, Tensors] = dict(backward_units(model, weights, caches, head))
        scale = 1.0  # a plain loop computes the global norm only to clip by it
        if settings.max_gradient_norm is not None:
            norms = [optimizers.squared_norm(grads[u]) for u in range(model.num_units)]
            scale = optimizers.clip_scale(norms, settings.max_gradient_norm)
        lr = optimizers.learning_rate_at(settings, self.step, self.num_steps)
        for unit in range(model.num_units):
            optimizers.apply_update(
                settings, self.weights[unit], grads[unit], self.states[unit], self.step, lr, scale
            )
        loss = head.loss_sum / head.num_predictions
        self.losses.append(loss)
        self.learning_rates.append(lr)
        self.step += 1
        return loss

    def train(self, until: int | None = None) -> list[float]:
        """Train up to step `until` (default: num_steps); returns all losses so far."""
        with one_blas_thread():  # once for the loop, not once a step (the benchmark's baseline)
            while self.step < (self.num_steps if until is None else until):
                self._train_step()
        return self.losses

    def evaluate(self) -> EvalResult:
        """Mean loss and accuracy of the current weights over the evaluation batches."""
        with one_blas_thread():
            return self._evaluate()

    def _evaluate(self) -> EvalResult:
        model = self.model
        weights = dict(enumerate(self.weights))
        loss_sum, correct, predictions = 0.0, 0, 0
        for index in range(model.num_eval_batches):
            batch = model.eval_batch(index)
            outputs, _ = forward_units(model, weights, batch.inputs)
            head = model.head(outputs, weights, batch.targets, 1, need_grad=False)
            loss_sum += head.loss_sum
            correct += head.num_correct
            predictions += head.num_predictions
        return EvalResult(loss_sum / predictions, correct / predictions)
