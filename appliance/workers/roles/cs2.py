"""CS-2: runs one step of its shard of the global batch, one streamed unit (layer) at a time.

Two calls to this CS-2's SwarmX, opened by the first training step, serve every training step:
a StreamStepWeights stream brings each version's units in turn, last unit first
(appliance.workers.topology.weight_order: the order in which they become ready), and one
PushGradients stream takes every step's gradients. Setting a call up costs more here than the
megabyte it carries (bench/data_plane_floor.py), hence no call per step. Forward computes each
unit as soon as it and the units before it are in. Backward runs in reverse unit order, on the
event loop; each unit's gradient goes out as soon as it is complete while backward carries on
(see appliance.workers.models.model for tied weights). A message carries a whole unit unless it
exceeds the chunk size, because each message costs more than the bytes it carries.

RunStep answers as soon as the step's gradients are on their way: MemoryX updates each layer as
its gradient completes and sends the next version as soon as it is applied, so the next step's
weights may be here before its RunStep. With clipping, the chief's GradientNorms call waits at
MemoryX for the sums. The next RunStep (training or evaluation) fails if the push failed. On
the job's last step, RunStep answers once MemoryX has taken every layer of every step.
The gradient is that of (sum of this shard's losses) / (predictions in the global batch), so the
shards' gradients add up to the gradient of the global mean loss. A step's weights are dropped
when the step ends; the CS-2 holds no weights but the next version's as they arrive.

Evaluation steps run forward and the loss only, on the CS-2's shard of an evaluation batch, with
one StreamStepWeights call for the version they evaluate.

On a data set (a section with a data_dir) the batches come from the CS-2's input workers
(roles/cs2_feed.py) and the loss is normalised by the global batch's actual sample count (an
epoch's last batch may be short); the step's result carries the batch's input position, which
the chief records in its checkpoints. Synthetic batches are made here, from the seed and step.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Coroutine, Iterable
from typing import Any, TypeVar

import grpc

from appliance._proto.v1 import dataplane_pb2 as pb
from appliance._proto.v1 import dataplane_pb2_grpc
from appliance.workers.control import ControlPlane
from appliance.workers.lifecycle import StopSignal
from appliance.workers.models.model import Batch, Tensors, backward_units
from appliance.workers.roles.cs2_feed import INPUT_WAIT, CS2Input, FeedError
from appliance.workers.step_trace import TRACE
from appliance.workers.topology import JobLayout, weight_order
from appliance.workers.transport.channels import PeerChannels
from appliance.workers.transport.tensors import TRAFFIC, LayerTensors, encode_layer, read_layers
from appliance.workers.transport.weight_rpc import WeightStreamingClient
from appliance.workers.transport.wire import WireChunk

log = logging.getLogger(__name__)
_T = TypeVar("_T")

# A step's result and, unless the step had to wait for it, its gradient push.
_StepOutcome = tuple[pb.RunStepResult, "asyncio.Future[None] | None"]
# Weights of the units as they arrive (None once the stream ended) and the task reading them.
_Arrivals = tuple["asyncio.Queue[LayerTensors | None]", "asyncio.Future[None]"]


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

    def add_services(self, server: grpc.aio.Server) -> None:
        dataplane_pb2_grpc.add_StepExecutionServicer_to_server(self, server)

    def configure(self, layout: JobLayout) -> None:
        if self._layout is None:
            self._layout = layout
            if layout.workers:
                self._input = CS2Input(layout, self.index, self._channels, self._step_timeout)
            self._configured.set()
            log.info("streaming through %s", layout.swarmx_of_cs2(self.index).name)

    async def run(self, control: ControlPlane, stop: StopSignal) -> None:
        await asyncio.Future()  # serve until stopped

    async def close(self) -> None:
        TRAFFIC.report(log)
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
        swarmx = layout.swarmx_of_cs2(self.index)
        weights = self._channels.weight_streaming(swarmx.address, "weights")
        gradients = self._channels.weight_streaming(swarmx.address, "gradients")
        if self._streams is None and not request.evaluate:
            self._streams = _TrainingStreams(layout, request.step, weights, gradients)
        step = _StepRun(layout, self.index, weights, self._streams, self._step_timeout)
        step.input = self._input
        previous, self._push = self._push, None
        started = time.perf_counter()
        try:
            result, self._push = await _alongside(step.run(request), previous)
            if not request.evaluate:
                INPUT_WAIT.step_seconds += time.perf_counter() - started
            return result
        except FeedError as err:  # an input worker failed (it says why itself)
            await context.abort(err.code, f"cs2-{self.index} step {request.step}: {err}")
            raise AssertionError("unreachable") from err
        except grpc.aio.AioRpcError as err:
            await context.abort(
                err.code(), f"cs2-{self.index} step {request.step}: {swarmx.name}: {err.details()}"
            )
            raise AssertionError("unreachable") from err
        except ValueError as err:  # a malformed weight stream
            await context.abort(
                grpc.StatusCode.INTERNAL, f"cs2-{self.index} step {request.step}: {err}"
            )
            raise AssertionError("unreachable") from err


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
    """One RunStep call: the weights streamed in and the activations kept for backward."""

    def __init__(
        self,
        layout: JobLayout,
        index: int,
        weights: WeightStreamingClient,
        streams: _TrainingStreams | None,
        timeout: float,
    ) -> None:
        self.layout = layout
        self.model = layout.model
        self.index = index
        self.weight_stub = weights
        self.streams = streams
        self.timeout = timeout
        self.weights: dict[int, Tensors] = {}
        self.input: CS2Input | None = None

    async def run(self, request: pb.RunStepRequest) -> _StepOutcome:
        """The step's result, and its gradient push if that may complete in the background."""
        model = self.model
        if not request.evaluate:
            TRACE.mark("cs2_step_start", request.step)
        streams = None if request.evaluate else self.streams
        # An evaluation step asks for its version's weights; a training step takes the next
        # version's from the stream that brings every training step's.
        arrivals = self._stream_weights(request.step) if streams is None else streams.arrivals
        fed = None
        try:  # the weights travel while a worker thread makes the batch (or a worker sends it)
            if self.input is not None and self.input.feeds(request.evaluate):
                fed = await self.input.batch(request)
                batch = fed.batch
            else:
                batch = await asyncio.to_thread(self._batch, request)
            outputs, caches = await self._forward(
                request.step, batch, arrivals, None if streams is None else streams.push
            )
        finally:
            if streams is None:
                arrivals[1].cancel()
        samples = model.batch_size if fed is None else fed.global_samples
        normalizer = samples * model.predictions_per_sample
        head = model.head(outputs, self.weights, batch.targets, normalizer, not request.evaluate)
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
            return result, None
        pushed = asyncio.ensure_future(self._backward(request.step, caches, head, streams.push))
        clipping = self.layout.params.optimizer.max_gradient_norm is not None
        if clipping or request.step + 1 >= self.layout.num_steps:
            await pushed  # the chief reads the norms next (MemoryX waits for the sums)
            return result, None
        return result, pushed

    def _batch(self, request: pb.RunStepRequest) -> Batch:
        """This CS-2's shard of the step's training batch or of the evaluation batch."""
        model, count = self.model, len(self.layout.cs2)
        if request.evaluate:
            return model.eval_batch(request.eval_batch).shard(self.index, count)
        return model.train_batch(request.step).shard(self.index, count)

    def _stream_weights(self, version: int) -> _Arrivals:
        """Start streaming every unit's weights at `version`; they queue up as they arrive."""
        request = pb.StepWeightsRequest(step=version, layers=weight_order(self.model.num_units))
        stream = self.weight_stub.stream_step_weights(request, self.timeout)
        arrived: asyncio.Queue[LayerTensors | None] = asyncio.Queue()
        return arrived, asyncio.ensure_future(_read_into(read_layers(stream), arrived))

    async def _forward(
        self, version: int, batch: Batch, arrivals: _Arrivals, push: _GradientPush | None
    ) -> tuple[Any, list[Any]]:
        """Forward unit by unit as the weights arrive. A training step watches the job's
        gradient `push` meanwhile (if it fails first, it fails the step); an evaluation step
        (no push) has a stream of its own that carries this step's weights only."""
        num_units = self.model.num_units
        arrived, reader = arrivals
        caches: list[Any] = []
        outputs: Any = batch.inputs
        try:
            for unit in range(num_units):
                while unit not in self.weights:  # units arrive in weight_order, not unit order
                    streamed = await _next_layer(arrived, reader, push)
                    if streamed.step != version or not 0 <= streamed.layer < num_units:
                        raise ValueError(f"unexpected unit {streamed.layer} at {streamed.step}")
                    if streamed.layer in self.weights:
                        raise ValueError(f"unit {streamed.layer} streamed twice")
                    self.weights[streamed.layer] = streamed.tensors
                    TRACE.mark("cs2_weights_in", version, streamed.layer)
                # On the event loop: a thread hand-off per unit costs more than it overlaps;
                # gRPC keeps receiving the next units meanwhile.
                outputs, cache = self.model.forward_unit(unit, self.weights[unit], outputs)
                caches.append(cache)
            if push is None:
                await reader
        finally:
            if push is None:
                reader.cancel()
        return outputs, caches

    async def _backward(
        self, step: int, caches: list[Any], head: Any, push: _GradientPush
    ) -> None:
        """Backward unit by unit on the event loop; each unit's gradient goes out once done.

        Not in a worker thread: the last unit's gradient starts the next step's critical path
        (MemoryX's update of unit 0, then its weights back), and a thread hand-off delays it by
        a scheduler wake-up. gRPC sends a unit's chunks in its own threads while the next unit
        is computed.
        """
        for unit, grads in backward_units(self.model, self.weights, caches, head):
            push.send(encode_layer(step, unit, self.index, grads))
            TRACE.mark("cs2_gradient_out", step, unit)
            # gRPC takes the unit's chunks (its write of the unit before may first have to
            # complete) before the next unit is computed, so they travel meanwhile.
            await push.taken()
        if step + 1 >= self.layout.num_steps:
            await push.close()  # the job's last step: answered once MemoryX has every layer


class _TrainingStreams:
    """A CS-2's two calls for all its training steps, opened by the first: every version's
    weights from that step's on, and a push of every step's gradients."""

    def __init__(
        self,
        layout: JobLayout,
        first: int,
        weights: WeightStreamingClient,
        gradients: WeightStreamingClient,
    ) -> None:
        request = pb.StepWeightsRequest(
            step=first,
            layers=weight_order(layout.model.num_units),
            num_steps=layout.num_steps - first,
        )
        stream = weights.stream_step_weights(request, None)  # as long as the job
        arrived: asyncio.Queue[LayerTensors | None] = asyncio.Queue()
        self.arrivals: _Arrivals = (
            arrived,
            asyncio.ensure_future(_read_into(read_layers(stream), arrived)),
        )
        self.push = _GradientPush(gradients, None)

    def cancel(self) -> None:
        self.arrivals[1].cancel()
        self.push.cancel()


class _GradientPush:
    """A PushGradients call, open before its gradients exist; chunks queue up."""

    def __init__(self, stub: WeightStreamingClient, timeout: float | None) -> None:
        self._ready: asyncio.Queue[WireChunk | None] = asyncio.Queue()
        self._taken = asyncio.Event()  # set while gRPC has taken every chunk sent so far
        self._call = asyncio.ensure_future(stub.push_gradients(self._chunks(), timeout))

    async def _chunks(self) -> AsyncIterator[WireChunk]:
        while (chunk := await self._ready.get()) is not None:
            if self._ready.empty():
                self._taken.set()
            yield chunk

    def send(self, chunks: Iterable[WireChunk]) -> None:
        for chunk in chunks:
            self._ready.put_nowait(chunk)
            self._taken.clear()

    async def taken(self) -> None:
        """Until gRPC has taken every chunk sent so far; raises if the call ended."""
        await self.unless_ended(self._taken.wait())

    async def unless_ended(self, awaitable: Awaitable[_T]) -> _T:
        """`awaitable`'s result, unless the call ends first: then its error. A push ends only
        when closed, so while a step waits for its weights a failed push fails the step (the
        next version would never come: its gradients did not get through)."""
        waiting = asyncio.ensure_future(awaitable)
        try:
            await asyncio.wait({waiting, self._call}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not waiting.done():
                waiting.cancel()
        if waiting.done():
            return waiting.result()
        self._call.result()  # raises the call's error
        raise ValueError("the gradient push ended early")

    async def close(self) -> None:
        """End the stream; returns once MemoryX has taken every layer (raises if it failed)."""
        self._ready.put_nowait(None)
        await self._call

    def cancel(self) -> None:
        self._call.cancel()


async def _read_into(
    layers: AsyncIterator[LayerTensors], arrived: asyncio.Queue[LayerTensors | None]
) -> None:
    """Take in every layer of the stream as it arrives; None marks the end."""
    try:
        async for layer in layers:
            arrived.put_nowait(layer)
    finally:
        arrived.put_nowait(None)


async def _next_layer(
    arrived: asyncio.Queue[LayerTensors | None],
    reader: asyncio.Future[None],
    push: _GradientPush | None,
) -> LayerTensors:
    """The next streamed layer; the reader's error if the stream failed or ended early, or the
    push's if `push` is given and it failed first."""
    if not arrived.empty() or push is None:
        layer = await arrived.get()
    else:
        layer = await push.unless_ended(arrived.get())
    if layer is None:
        await reader  # raises the stream's error, if any
        raise ValueError("the weight stream ended early")
    return layer
