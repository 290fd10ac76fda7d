"""The chief's loop over a job's steps: train, clip, update, evaluate, summarise, checkpoint.

Step k: every CS-2 runs k. Without clipping, MemoryX applies each layer's update as soon as its
summed gradient is complete (with the learning rate of step k's schedule); RunStep answers once
the gradients are on their way, and whatever reads weights next (step k + 1, an evaluation, a
checkpoint) waits for version k + 1 at MemoryX. With clipping, the chief then gathers every
layer's squared gradient norm from the MemoryXs (each waits until it holds the layer's sum),
adds them in layer order and derives the clip scale; then every MemoryX applies the update
with the step's learning rate and that scale. No clipped update is applied before the
global norm is known. The loss of a step is the mean over the global batch's predictions.
Evaluation runs every `runconfig.eval_steps` (train_and_eval) and at the end, before the last
report (progress carries the newest evaluation to the user); checkpoints every
`runconfig.checkpoint_steps` and at the end; summaries every `runconfig.log_steps` (else
about a hundred a run: summaries.log_interval) and at the end. `--mode eval` evaluates the
checkpoint it starts from over `runconfig.eval_steps` batches, else eval_input's num_batches.
On a data set each checkpoint records where the next global batch starts (the position the
CS-2s report with each step); a resumed run's first step must start there, or the data set
(or its shuffle settings) changed since: the job fails saying so.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from appliance._proto.v1 import common_pb2
from appliance._proto.v1 import dataplane_pb2 as pb
from appliance.workers import checkpoints
from appliance.workers.control import ControlPlane
from appliance.workers.lifecycle import EXIT_FAILED, ReplicaExit
from appliance.workers.models import optimizers
from appliance.workers.safe_files import write_whole
from appliance.workers.summaries import SummaryLog, log_interval, write_final_metrics
from appliance.workers.topology import JobLayout
from appliance.workers.transport.peer_calls import PeerCalls

log = logging.getLogger(__name__)

PROGRESS_INTERVAL = 0.5


@dataclasses.dataclass
class _Rate:
    """Where the last report (or summary) was: for steps/s and samples/s since it."""

    since: float
    step: int
    samples: int  # training samples up to `step` (this run's)


class TrainingLoop:
    """Drives one job from its first (or resumed) step to its last."""

    def __init__(self, layout: JobLayout, calls: PeerCalls, control: ControlPlane) -> None:
        self.layout = layout
        self.calls = calls
        self.control = control
        self.params = layout.params
        self.model_dir = Path(layout.model_dir) if layout.model_dir else None
        resume = layout.resume_from
        resumed = checkpoints.read_checkpoint(Path(resume)) if resume else None
        self.start_step = resumed.step if resumed else 0
        # Where the next batch starts in the data set (None: synthetic data, or not recorded).
        self._resumed_position = resumed.input_position if resumed else None
        self._input_position = self._resumed_position
        # A training run drops what an earlier one recorded past its start; an evaluation
        # adds its points to the run it evaluates.
        resumed_at = None if layout.mode == "eval" else self.start_step
        self.summaries = (
            SummaryLog(self.model_dir, resumed_at, control.job_id) if self.model_dir else None
        )
        self.checkpoint_step = self.start_step  # the newest checkpoint of the run
        self._written: int | None = None  # the step of the last checkpoint this run wrote
        # The newest evaluation (reported with the progress) and the step it was made at.
        self._evaluation: dict[str, float] = {}
        self._evaluated_at: int | None = None
        self._eval_samples = 0  # how many samples the newest evaluation covered
        self._eval_set_batches: int | None = None  # one pass over eval_input's data set
        # Training samples this run has stepped through: a data set's short last batch (no
        # drop_last_batch) counts what it holds, not batch_size.
        self._samples = 0
        self._samples_per_second = 0.0
        # The most weight bytes a CS-2 held at once since the last summary, and in the run.
        self._peak_weight_bytes = 0
        self._most_weight_bytes = 0

    async def run(self) -> dict[str, Any] | None:
        """Run the job; returns its final metrics, or None if the coordinator said stop."""
        try:
            metrics = await self._run()
        finally:
            if self.summaries:
                self.summaries.close()
        if metrics is not None and self.model_dir:
            await asyncio.to_thread(write_final_metrics, self.model_dir, metrics)
        return metrics

    async def _run(self) -> dict[str, Any] | None:
        layout, runconfig = self.layout, self.params.runconfig
        step = self.start_step
        metrics: dict[str, Any] = {"step": step, "loss": None}
        if layout.mode == "eval":
            metrics.update(await self._evaluate(step, runconfig.eval_steps))
            metrics["eval_samples"] = self._eval_samples
            log.info("evaluated %d samples of the weights at step %d", self._eval_samples, step)
            await self._report(step, metrics["eval_loss"], 0.0, final=True)
            return metrics
        rate = _Rate(time.monotonic(), step, 0)
        last_log = _Rate(time.monotonic(), step, 0)
        interval = log_interval(runconfig.log_steps, layout.num_steps)
        for step in range(self.start_step, layout.num_steps):
            loss, learning_rate = await self._train_step(step)
            done = step + 1
            metrics.update(step=done, loss=loss, learning_rate=learning_rate)
            final = done == layout.num_steps
            if done % interval == 0 or final:
                self._summarise(done, loss, learning_rate, last_log)
            evaluate = runconfig.eval_steps and done % runconfig.eval_steps == 0
            # The last evaluation comes before the last report, which carries it to the user.
            if layout.mode == "train_and_eval" and (evaluate or final):
                metrics.update(await self._evaluate(done))
            checkpointed = False
            if runconfig.checkpoint_steps and done % runconfig.checkpoint_steps == 0 and not final:
                await self._checkpoint(done)
                checkpointed = True
            now = time.monotonic()
            # A checkpoint is reported at once: a restart decided meanwhile names it, and
            # preemption weighs the work since it.
            if now - rate.since >= PROGRESS_INTERVAL or final or checkpointed:
                elapsed = max(now - rate.since, 1e-9)
                steps_per_second = (done - rate.step) / elapsed
                self._samples_per_second = (self._samples - rate.samples) / elapsed
                rate = _Rate(now, done, self._samples)
                if not await self._report(done, loss, steps_per_second, final, learning_rate):
                    return None
        await self._checkpoint(layout.num_steps)
        if layout.mode == "train_and_eval" and self._evaluated_at != layout.num_steps:
            metrics.update(await self._evaluate(layout.num_steps))  # resumed at the end
        metrics["peak_weight_bytes"] = self._most_weight_bytes
        return metrics

    def _held(self, results: list[pb.RunStepResult]) -> None:
        """Keep the most weight bytes any CS-2 says it held at once."""
        peak = max(r.peak_weight_bytes for r in results)
        self._peak_weight_bytes = max(self._peak_weight_bytes, peak)
        self._most_weight_bytes = max(self._most_weight_bytes, peak)

    async def _train_step(self, step: int) -> tuple[float, float]:
        results = await self.calls.run_step(step)
        self._held(results)
        self._samples += sum(r.num_samples for r in results)
        if results[0].HasField("position"):
            self._follow_input(step, results[0].position, results[0].next_position)
        loss = math.fsum(r.loss_sum for r in results) / sum(r.num_predictions for r in results)
        settings = self.params.optimizer
        learning_rate = optimizers.learning_rate_at(settings, step, self.layout.num_steps)
        if settings.max_gradient_norm is not None:  # else MemoryX has applied the updates
            norms = await self.calls.gradient_norms(step)
            scale = optimizers.clip_scale(norms, settings.max_gradient_norm)
            await self.calls.apply_updates(step, learning_rate, scale)
        return loss, learning_rate

    def _follow_input(
        self, step: int, position: pb.InputPosition, after: pb.InputPosition
    ) -> None:
        """Keep where the next batch starts; on a resumed run's first step, check the data set
        puts the step's batch where the checkpoint says it goes on."""
        saved = self._resumed_position
        if step == self.start_step and saved is not None:
            now = checkpoints.DataPosition(position.epoch, position.offset, position.seed)
            if now != saved:
                raise ReplicaExit(
                    EXIT_FAILED,
                    f"the data set changed since {self.layout.resume_from}: training was to go "
                    f"on at epoch {saved.epoch} sample {saved.offset} (shuffle seed "
                    f"{saved.seed}), but the data set now puts step {step}'s batch at epoch "
                    f"{now.epoch} sample {now.offset} (shuffle seed {now.seed}); resume with "
                    "the data set and shuffle settings it was trained with, or start a new run",
                )
        self._input_position = checkpoints.DataPosition(after.epoch, after.offset, after.seed)

    async def _eval_batches(self) -> int:
        """Batches of one evaluation when eval_input.num_batches is not given: one pass over
        the data set (as the Model Zoo's evaluation reads its whole loader), asked of the input
        workers once; else the synthetic default."""
        if self.params.eval_input.num_batches is None and self.layout.feeds(training=False):
            if self._eval_set_batches is None:
                self._eval_set_batches = await self.calls.eval_set_batches()
            return self._eval_set_batches
        return self.layout.model.num_eval_batches

    async def _evaluate(self, version: int, batches: int | None = None) -> dict[str, float]:
        """Loss and accuracy over `batches` evaluation batches (eval_input's num_batches; else
        one pass over its data set, or the synthetic default) with the weights at `version`."""
        loss_sum, correct, predictions, samples = 0.0, 0, 0, 0
        count = await self._eval_batches() if batches is None else batches
        for index in range(count):
            results = await self.calls.run_step(version, evaluate=True, eval_batch=index)
            self._held(results)
            loss_sum += math.fsum(r.loss_sum for r in results)
            correct += sum(r.num_correct for r in results)
            predictions += sum(r.num_predictions for r in results)
            samples += sum(r.num_samples for r in results)
        evaluation = {"eval_loss": loss_sum / predictions, "eval_accuracy": correct / predictions}
        log.info("evaluation at step %d: %s", version, evaluation)
        self._evaluation, self._evaluated_at = evaluation, version
        self._eval_samples = samples  # a short last batch counts what it holds
        if self.summaries:
            self.summaries.record(version, evaluation)
        return evaluation

    def _summarise(self, done: int, loss: float, learning_rate: float, last: _Rate) -> None:
        now = time.monotonic()
        samples_per_second = (self._samples - last.samples) / max(now - last.since, 1e-9)
        last.since, last.step, last.samples = now, done, self._samples
        if self.summaries:
            self.summaries.record(
                done,
                {
                    "loss": loss,
                    "learning_rate": learning_rate,
                    "samples_per_second": samples_per_second,
                    "peak_weight_bytes": self._peak_weight_bytes,
                },
            )
        self._peak_weight_bytes = 0

    async def _checkpoint(self, step: int) -> None:
        if self.model_dir is None or step == self._written:
            return
        layers = await self.calls.fetch_layers(step, with_state=True)
        split = {layer: checkpoints.split_layer_state(t) for layer, t in layers.items()}
        checkpoint = checkpoints.Checkpoint(
            step=step,
            params_digest=self.params.model_digest(),
            optimizer_type=self.params.optimizer.optimizer_type,
            weights={layer: weights for layer, (weights, _) in split.items()},
            states={layer: state for layer, (_, state) in split.items()},
            input_position=self._input_position,
        )
        path = await asyncio.to_thread(checkpoints.write_checkpoint, self.model_dir, checkpoint)
        weights = {
            f"{name}_{layer}": array
            for layer, (tensors, _) in split.items()
            for name, array in tensors.items()
        }
        await asyncio.to_thread(_write_weights, self.model_dir / "weights.npz", weights)
        self.checkpoint_step = self._written = step
        log.info("wrote %s", path)

    async def _report(
        self, done: int, loss: float, steps_per_second: float, final: bool, lr: float = 0.0
    ) -> bool:
        """Report progress; False if the coordinator says to stop. Asked for a checkpoint now
        (the job is being preempted), write one at this step boundary and report it: the next
        attempt resumes exactly here."""
        progress = self._progress(done, loss, steps_per_second, lr)
        directive = await self.control.report_progress(progress, retry=final)
        log.info("step %d/%d loss %.4f (%.1f steps/s)", done, progress.num_steps, loss,
                 steps_per_second)  # fmt: skip
        asked = directive is not None and directive.keep_running and directive.checkpoint_now
        if asked and self.model_dir is not None:
            log.info("asked for a checkpoint now: writing one at step %d", done)
            await self._checkpoint(done)
            progress = self._progress(done, loss, steps_per_second, lr)
            directive = await self.control.report_progress(progress, retry=True, checkpointed=True)
        if directive is not None and not directive.keep_running:
            log.info("the coordinator says stop; stopping at step %d", done)
            return False
        return True

    def _progress(
        self, done: int, loss: float, steps_per_second: float, lr: float
    ) -> common_pb2.Progress:
        # An evaluation is of the weights at one step, whatever num_steps says: at its end.
        evaluating = self.layout.mode == "eval"
        return common_pb2.Progress(
            step=done,
            num_steps=done if evaluating else self.layout.num_steps,
            loss=loss,
            steps_per_second=steps_per_second,
            samples_per_second=self._samples_per_second,
            reported_at=time.time(),
            checkpoint_step=self.checkpoint_step,
            resumed_from_step=self.start_step,
            learning_rate=lr,
            eval_loss=self._evaluation.get("eval_loss"),
            eval_accuracy=self._evaluation.get("eval_accuracy"),
            eval_samples=self._eval_samples,
        )


def _write_weights(path: Path, weights: dict[str, Any]) -> None:
    """weights.npz (`<tensor>_<layer>` keys), replaced atomically, never through a link."""
    write_whole(path, lambda file: np.savez(file, **weights))
