"""CS-2: runs one step of its shard of the global batch, one streamed unit (layer) at a time.

Two calls to this CS-2's SwarmX, opened by the first training step, serve every training step:
a StreamStepWeights stream brings each version's units in the order the article gives
(appliance.domain.weight_schedule.training_order): forward 0..U-1, the head's tied units, then
U-1..0 again for backward; and one PushGradients stream takes every step's gradients. Setting a
call up costs more here than the megabyte it carries (bench/data_plane_floor.py), hence no call
per step. The wafer holds activations, not the model (roles/cs2_weights.py): forward computes
each unit as it comes and drops it; backward, on the event loop, takes each unit again, computes
its gradient, sends it at once while backward carries on (see appliance.workers.models.model for
tied weights) and drops the unit and its activations. At most one more unit than the one
computed on is held, decoded; each result reports the most weight bytes held at once. A message
carries a whole unit unless it exceeds the chunk size, because each message costs more than the
bytes it carries.

RunStep answers as soon as the forward pass and the loss are done (with clipping, and on the
job's last step, once backward has pushed every gradient): MemoryX updates each layer as its
gradient completes. The next training step's forward waits until the last one's backward took
its units; an evaluation step waits until that backward is done (its version needs the
updates). With clipping, the chief's GradientNorms call waits at MemoryX for the sums. The next
RunStep (training or evaluation) fails if the push failed. On the job's last step, RunStep
answers once MemoryX has taken every layer of every step. The gradient is that of (sum of this
shard's losses) / (predictions in the global batch), so the shards' gradients add up to the
gradient of the global mean loss.

Evaluation steps run forward and the loss only, on the CS-2's shard of an evaluation batch, with
one StreamStepWeights call for the version they evaluate (forward and the head's units only).

On a data set (a section with a data_dir) the batches come from the CS-2's input workers
(roles/cs2_feed.py) and the loss is normalised by the global batch's actual sample count (an
epoch's last batch may be short); the step's result carries the batch's input position, which
the chief records in its checkpoints. Synthetic batches are made here, from the seed and step.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import grpc

from appliance._proto.v1 import dataplane_pb2 as pb
from appliance._proto.v1 import dataplane_pb2_grpc
from appliance.domain.weight_schedule import forward_order, training_order
from appliance.workers.control import ControlPlane
from appliance.workers.lifecycle import StopSignal
from appliance.workers.models.model import Batch, backward_one
from appliance.workers.roles.cs2_feed import INPUT_WAIT, CS2Input, FeedError
from appliance.workers.roles.cs2_pipelined import WaferStore, run_pipelined_step
from appliance.workers.roles.cs2_push import GradientPush
from appliance.workers.roles.cs2_weights import UnitStream, WaferWeights
from appliance.workers.step_trace import TRACE
from appliance.workers.topology import JobLayout
from appliance.workers.transport.channels import PeerChannels
from appliance.workers.transport.tensors import TRAFFIC, LayerTensors, encode_layer, read_layers
from appliance.workers.transport.weight_rpc import WeightStreamingClient, add_weight_streaming

log = logging.getLogger(__name__)

# A step's result and, unless the step had to wait for it, its gradient push.
_StepOutcome = tuple[pb.RunStepResult, "asyncio.Future[None] | None"]


class CS2Role(dataplane_pb2_grpc.StepExecutionServicer):
    """The cs2 role: StepExecution servicer, a WeightStreaming client of its SwarmX."""

    def __init__(self, index: int, step_timeout: float, channels: PeerChannels) -> None:
        self.index = index
        self._step_timeout = step_timeout
        self._channels = channels
        self._layout: JobLayout | None = None
        self._configured = asyncio.Event()
        # The last training step's backward, until gRPC has taken its last gradient.
        self._push: asyncio.Future[None] | None = None
        # Opened by the first training step, for all of them.
        self._streams: _TrainingStreams | None = None
        self._input: CS2Input | None = None  # the input workers, on a data set
        self._wafer = WaferWeights()
        self._store = WaferStore(index)  # a pipelined job's layers

    def add_services(self, server: grpc.aio.Server) -> None:
        dataplane_pb2_grpc.add_StepExecutionServicer_to_server(self, server)
        # What the chief asks of MemoryX, served by a pipelined CS-2 (roles/cs2_pipelined.py).
        add_weight_streaming(self._store, server)
        dataplane_pb2_grpc.add_UpdateControlServicer_to_server(self._store, server)

    def configure(self, layout: JobLayout) -> None:
        if self._layout is None:
            if layout.pipelined:
                held = self._store.hold(layout)  # raises ValueError if it cannot resume
                log.info(
                    "pipelined: holding all %d layers, %d bytes",
                    len(held.layers),
                    held.weight_bytes,
                )
            self._layout = layout
            if layout.workers:
                self._input = CS2Input(layout, self.index, self._channels, self._step_timeout)
            self._configured.set()
            if not layout.pipelined:
                log.info("streaming through %s", layout.swarmx_of_cs2(self.index).name)

    async def run(self, control: ControlPlane, stop: StopSignal) -> None:
        await asyncio.Future()  # serve until stopped

    async def close(self) -> None:
        TRAFFIC.report(log)
        log.info("most weight bytes held at once: %d", self._wafer.largest)
        if self._input is not None:
            INPUT_WAIT.report(log)
            self._input.cancel()
        TRACE.write(f"cs2-{self.index}")
        if self._push is not None:
            self._push.cancel()
        if self._streams is not None:
            self._streams.cancel()
        await self._channels.close()

    async def RunStep(
        self, request: pb.RunStepRequest, context: grpc.aio.ServicerContext
    ) -> pb.RunStepResult:
        await self._configured.wait()
        layout = self._layout
        assert layout is not None
        source = "" if layout.pipelined else f"{layout.swarmx_of_cs2(self.index).name}: "
        try:
            if self._store.layers is not None:  # pipelined: the whole model is here
                return await run_pipelined_step(
                    layout, self.index, self._store.layers, self._input, request
                )
            return await self._streamed_step(layout, request)
        except FeedError as err:  # an input worker failed (it says why itself)
            await context.abort(err.code, f"cs2-{self.index} step {request.step}: {err}")
            raise AssertionError("unreachable") from err
        except grpc.aio.AioRpcError as err:
            await context.abort(
                err.code(), f"cs2-{self.index} step {request.step}: {source}{err.details()}"
            )
            raise AssertionError("unreachable") from err
        except ValueError as err:  # a malformed weight stream, or a layer at another version
            await context.abort(
                grpc.StatusCode.INTERNAL, f"cs2-{self.index} step {request.step}: {err}"
            )
            raise AssertionError("unreachable") from err

    async def _streamed_step(
        self, layout: JobLayout, request: pb.RunStepRequest
    ) -> pb.RunStepResult:
        swarmx = layout.swarmx_of_cs2(self.index)
        weights = self._channels.weight_streaming(swarmx.address, "weights")
        gradients = self._channels.weight_streaming(swarmx.address, "gradients")
        if self._streams is None and not request.evaluate:
            self._streams = _TrainingStreams(layout, request.step, weights, gradients, self._wafer)
        step = _StepRun(
            layout, self.index, weights, self._streams, self._step_timeout, self._wafer
        )
        step.input = self._input
        previous, self._push = self._push, None
        started = time.perf_counter()
        if request.evaluate and previous is not None:
            # Its version needs the last step's updates anyway; the wafer holds the units of
            # one pass at a time.
            await _completion(previous)
            previous = None
        result, self._push = await _alongside(step.run(request), previous)
        if not request.evaluate:
            INPUT_WAIT.step_seconds += time.perf_counter() - started
        return result


async def _alongside(
    run: Coroutine[Any, Any, _StepOutcome], previous: asyncio.Future[None] | None
) -> _StepOutcome:
    """Run a step while the previous step's push completes; either one's failure fails it."""
    if previous is None:
        return await run
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(_completion(previous))
            step = group.create_task(run)
    except ExceptionGroup as failures:
        raise failures.exceptions[0] from None
    return step.result()


async def _completion(push: asyncio.Future[None]) -> None:
    await asyncio.shield(push)


class _StepRun:
    """One RunStep call: the weights streamed in, unit by unit, and the activations kept for
    backward."""

    def __init__(
        self,
        layout: JobLayout,
        index: int,
        weights: WeightStreamingClient,
        streams: _TrainingStreams | None,
        timeout: float,
        wafer: WaferWeights,
    ) -> None:
        self.layout = layout
        self.model = layout.model
        self.index = index
        self.weight_stub = weights
        self.streams = streams
        self.timeout = timeout
        self.wafer = wafer
        self.input: CS2Input | None = None

    async def run(self, request: pb.RunStepRequest) -> _StepOutcome:
        """The step's result, and its gradient push if that may complete in the background."""
        model = self.model
        if not request.evaluate:
            TRACE.mark("cs2_step_start", request.step)
        streams = None if request.evaluate else self.streams
        # An evaluation step asks for its version's weights; a training step takes the next
        # version's from the stream that brings every training step's.
        if streams is None:
            units = self._stream_weights(request.step)
        else:
            units = streams.units
            await units.begin(request.step)
        push = None if streams is None else streams.push
        fed = None
        try:  # the weights travel while a worker thread makes the batch (or a worker sends it)
            if self.input is not None and self.input.feeds(request.evaluate):
                fed = await self.input.batch(request)
                batch = fed.batch
            else:
                batch = await asyncio.to_thread(self._batch, request)
            outputs, caches = await self._forward(request.step, batch, units, push)
            head_units = await self._head_units(request.step, units, push)
            samples = model.batch_size if fed is None else fed.global_samples
            normalizer = samples * model.predictions_per_sample
            head = model.head(
                outputs,
                {u.layer: u.tensors for u in head_units},
                batch.targets,
                normalizer,
                not request.evaluate,
            )
            for unit in head_units:
                units.drop(unit)
            if streams is None:
                await units.reader  # the evaluation stream ends with its head's units
        finally:
            if streams is None:
                units.close()
        result = pb.RunStepResult(
            loss_sum=head.loss_sum,
            num_samples=batch.num_samples,
            num_predictions=head.num_predictions,
            num_correct=head.num_correct,
        )
        if fed is not None and not request.evaluate:
            result.position.CopyFrom(fed.position)
            result.next_position.CopyFrom(fed.next_position)
        if streams is None:
            result.peak_weight_bytes = self.wafer.report()
            return result, None
        pushed = asyncio.ensure_future(self._backward(request.step, caches, head, streams))
        clipping = self.layout.params.optimizer.max_gradient_norm is not None
        if clipping or request.step + 1 >= self.layout.num_steps:
            await pushed  # the chief reads the norms next (MemoryX waits for the sums)
            result.peak_weight_bytes = self.wafer.report()
            return result, None
        result.peak_weight_bytes = self.wafer.report()  # the backward's units count next time
        return result, pushed

    def _batch(self, request: pb.RunStepRequest) -> Batch:
        """This CS-2's shard of the step's training batch or of the evaluation batch."""
        model, count = self.model, len(self.layout.cs2)
        if request.evaluate:
            return model.eval_batch(request.eval_batch).shard(self.index, count)
        return model.train_batch(request.step).shard(self.index, count)

    def _stream_weights(self, version: int) -> UnitStream:
        """Stream the forward pass's units (and the head's) at `version`, for an evaluation."""
        order = forward_order(self.model.num_units, self.model.head_units)
        request = pb.StepWeightsRequest(step=version, layers=order)
        stream = self.weight_stub.stream_step_weights(request, self.timeout)
        return UnitStream(read_layers(stream), self.wafer)

    async def _forward(
        self, version: int, batch: Batch, units: UnitStream, push: GradientPush | None
    ) -> tuple[Any, list[Any]]:
        """Forward unit by unit as the weights arrive, each dropped once computed on. A
        training step watches the job's gradient `push` meanwhile (if it fails first, it fails
        the step)."""
        caches: list[Any] = []
        outputs: Any = batch.inputs
        for unit in range(self.model.num_units):
            entry = units.entry(version, unit)
            streamed = await units.next(entry, version, unit, _watching(push))
            TRACE.mark("cs2_weights_in", version, unit)
            # On the event loop: a thread hand-off per unit costs more than it overlaps;
            # gRPC keeps receiving the next units meanwhile.
            outputs, cache = self.model.forward_unit(unit, streamed.tensors, outputs)
            caches.append(cache)
            units.drop(streamed)
        return outputs, caches

    async def _head_units(
        self, version: int, units: UnitStream, push: GradientPush | None
    ) -> list[LayerTensors]:
        """The units the head reads (a tied LM head: the embeddings), streamed once more."""
        order = forward_order(self.model.num_units, self.model.head_units)
        return [
            await units.next(units.entry(version, place), version, order[place], _watching(push))
            for place in range(self.model.num_units, len(order))
        ]

    async def _backward(
        self, step: int, caches: list[Any], head: Any, streams: _TrainingStreams
    ) -> None:
        """Backward unit by unit on the event loop, last to first, each unit's weights streamed
        again; each unit's gradient goes out once done and the unit and its activations leave.

        Not in a worker thread: the last unit's gradient starts the next step's critical path
        (MemoryX's update of unit 0, then its weights back), and a thread hand-off delays it by
        a scheduler wake-up. gRPC sends a unit's chunks in its own threads while the next unit
        is computed.
        """
        push, grad = streams.push, head.grad
        units, num_units = streams.units, self.model.num_units
        backward_from = len(forward_order(num_units, self.model.head_units))
        for place, unit in enumerate(reversed(range(num_units)), start=backward_from):
            entry = units.entry(step, place)
            streamed = await units.next(entry, step, unit, push.unless_ended)
            TRACE.mark("cs2_weights_in", step, unit)
            grads, grad = backward_one(
                self.model, unit, streamed.tensors, caches[unit], grad, head
            )
            units.drop(streamed)
            caches[unit] = None  # its activations are no longer needed
            push.send(encode_layer(step, unit, self.index, grads))
            TRACE.mark("cs2_gradient_out", step, unit)
            # gRPC takes the unit's chunks (its write of the unit before may first have to
            # complete) before the next unit is computed, so they travel meanwhile.
            await push.taken()
        TRACE.mark("cs2_peak_weight_bytes", step, self.wafer.peak)
        if step + 1 >= self.layout.num_steps:
            await push.close()  # the job's last step: answered once MemoryX has every layer


def _watching(
    push: GradientPush | None,
) -> Callable[[Awaitable[LayerTensors | None]], Awaitable[LayerTensors | None]] | None:
    return None if push is None else push.unless_ended


class _TrainingStreams:
    """A CS-2's two calls for all its training steps, opened by the first: every version's
    units from that step's on (forward, then again in reverse), and a push of every step's
    gradients."""

    def __init__(
        self,
        layout: JobLayout,
        first: int,
        weights: WeightStreamingClient,
        gradients: WeightStreamingClient,
        wafer: WaferWeights,
    ) -> None:
        order = training_order(layout.model.num_units, layout.model.head_units)
        request = pb.StepWeightsRequest(
            step=first, layers=order, num_steps=layout.num_steps - first
        )
        stream = weights.stream_step_weights(request, None)  # as long as the job
        self.units = UnitStream(read_layers(stream), wafer, first, len(order))
        self.push = GradientPush(gradients, None)

    def cancel(self) -> None:
        self.units.close()
        self.push.cancel()
