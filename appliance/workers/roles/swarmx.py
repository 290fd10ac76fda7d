"""SwarmX: broadcasts each layer's weights to its CS-2s and reduces their gradients.

Every call between the replicas of a training run is long-lived: set up once, it carries every
step, because setting up a call costs more here than the megabyte it carries
(bench/data_plane_floor.py). Evaluation steps still ask for one version at a time.

Weights: in a job that trains, the first request for a version opens one StreamStepWeights
stream per MemoryX for that version and every later one that a training step uses (an
evaluation-only job fetches its one version on its own), each MemoryX's share of the step's
broadcasts in the order of appliance.domain.weight_schedule.training_order: forward, the
head's tied units, then backward in reverse, so a unit comes two or three times per version.
MemoryX sends each broadcast as soon as the layer reaches the version, i.e. as soon as the
previous step's update of it is applied. Chunks are kept per (version, layer, broadcast) as they
arrive and every CS-2 gets the same ones, each as soon as it is here: a CS-2's stream for its
training steps (one call for all of them) or for one evaluation version (its forward
broadcasts). A layer's kept broadcasts are dropped once every CS-2 pushed its gradient for it
(they are all past its backward pass); an evaluation request drops every older version.

Gradients: each CS-2 pushes one stream for all its steps, its layers' gradients in backward
order; once all of this SwarmX's CS-2s have pushed chunk i of a layer, their chunks are added in
CS-2 index order and the sum goes on at once, as chunk i of one partial sum, into the stream to
the owning MemoryX (one per MemoryX, opened when the first CS-2 push arrives and closed when
the last one ends). Relaying and reducing chunk by chunk (appliance.workers.transport.relay) lets
the hops of a big layer overlap. A CS-2's push is answered once MemoryX has taken every layer of
every step it carried (appliance.workers.roles.memoryx). If a stream breaks off (to a MemoryX, or a
CS-2's push), the weights still to come and every later request fail with its error, so the CS-2s'
next steps fail at once instead of waiting for versions that will not come.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import grpc

from appliance._proto.v1 import dataplane_pb2 as pb
from appliance.domain.weight_schedule import occurrences, training_order
from appliance.workers.control import ControlPlane
from appliance.workers.lifecycle import StopSignal
from appliance.workers.step_trace import TRACE
from appliance.workers.topology import JobLayout, PeerAddress
from appliance.workers.transport.channels import PeerChannels
from appliance.workers.transport.relay import ChunkOrder, LayerRelay, sum_chunks
from appliance.workers.transport.tensors import TRAFFIC
from appliance.workers.transport.weight_rpc import add_weight_streaming
from appliance.workers.transport.wire import WireChunk

log = logging.getLogger(__name__)

# (step, layer, broadcast): a training step broadcasts a unit two or three times (forward, a
# tied head, backward; appliance.domain.weight_schedule), each its own relay.
LayerKey = tuple[int, int, int]
_END = None  # closes an outgoing gradient stream


@dataclasses.dataclass
class _OutgoingPushes:
    """The PushGradients stream to each MemoryX that holds layers: its queue and its answer."""

    queues: dict[PeerAddress, asyncio.Queue[WireChunk | None]]
    acks: dict[PeerAddress, asyncio.Task[None]]


@dataclasses.dataclass
class _StepReduction:
    """One step's gradients: what the CS-2s pushed so far, and how many layers were summed."""

    received: dict[tuple[int, int], dict[int, WireChunk]]  # (layer, chunk) -> cs2 -> chunk
    summed: int = 0


class SwarmXRole:
    """The swarmx role: WeightStreaming towards CS-2s, a client of MemoryX."""

    def __init__(self, index: int, step_timeout: float, channels: PeerChannels) -> None:
        self.index = index
        self._step_timeout = step_timeout
        self._channels = channels
        self._layout: JobLayout | None = None
        self._configured = asyncio.Event()
        self._weights: dict[LayerKey, LayerRelay] = {}
        self._fetches: set[asyncio.Task[None]] = set()
        self._reductions: dict[int, _StepReduction] = {}
        # The versions that the long-lived streams from the MemoryXs bring (see _fetch).
        self._streamed: range | None = None
        # The pushes to the MemoryXs, while any CS-2's push is open.
        self._pushes: _OutgoingPushes | None = None
        self._open_cs2_pushes = 0
        # Set once a stream broke off: every later request for weights fails with it.
        self._failure: BaseException | None = None

    def add_services(self, server: grpc.aio.Server) -> None:
        add_weight_streaming(self, server)

    def configure(self, layout: JobLayout) -> None:
        if self._layout is None:
            self._layout = layout
            self._configured.set()
            log.info("serving cs2 %s", layout.cs2_of_swarmx(self.index))

    async def run(self, control: ControlPlane, stop: StopSignal) -> None:
        await asyncio.Future()  # serve until stopped

    async def close(self) -> None:
        TRAFFIC.report(log)
        TRACE.write(f"swarmx-{self.index}")
        for task in self._fetches:
            task.cancel()
        if self._pushes is not None:
            for ack in self._pushes.acks.values():
                ack.cancel()
        await self._channels.close()

    async def StreamWeights(
        self, request: pb.WeightsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[WireChunk]:
        async for chunk in self._relay(request.step, [request.layer], context):
            yield chunk

    async def StreamStepWeights(
        self, request: pb.StepWeightsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[WireChunk]:
        if request.num_steps <= 1:  # an evaluation version
            async for chunk in self._relay(request.step, list(request.layers), context):
                yield chunk
            return
        for version in range(request.step, request.step + request.num_steps):
            async for chunk in self._relay(version, list(request.layers), context, drop=False):
                yield chunk

    async def PushGradients(
        self, request_iterator: AsyncIterator[WireChunk], context: grpc.aio.ServicerContext
    ) -> pb.GradientAck:
        await self._configured.wait()
        layout = self._layout
        assert layout is not None
        expected = set(layout.cs2_of_swarmx(self.index))
        if self._pushes is None:
            self._pushes = self._open_pushes(layout)
        pushes = self._pushes
        order = ChunkOrder()
        self._open_cs2_pushes += 1
        complete = False
        try:
            async for chunk in request_iterator:
                if chunk.source_index not in expected:
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT, f"cs2-{chunk.source_index} is not mine"
                    )
                index = order.index_of(chunk)
                if chunk.last:
                    TRACE.mark("swarmx_gradient_in", chunk.step, chunk.layer)
                self._add_gradient(layout, pushes, chunk, index, expected)
            if order.inside_layer:
                raise ValueError("the gradient stream ended inside a layer")
            complete = True
        except ValueError as err:
            self._fail_weights(ValueError(f"a gradient push was refused: {err}"))
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
            raise AssertionError("unreachable") from err
        finally:
            if not complete:  # the steps it carried will never be summed: nor updated
                self._fail_weights(ValueError("a CS-2's gradient push broke off"))
            self._open_cs2_pushes -= 1
            if self._open_cs2_pushes == 0 and self._pushes is pushes:
                for queue in pushes.queues.values():
                    queue.put_nowait(_END)
                self._pushes = None
        for ack in pushes.acks.values():
            try:
                await asyncio.shield(ack)
            except grpc.aio.AioRpcError as err:
                await context.abort(err.code(), f"swarmx-{self.index}: memoryx: {err.details()}")
        return pb.GradientAck(accepted=True)

    async def _relay(
        self, step: int, layers: list[int], context: grpc.aio.ServicerContext, drop: bool = True
    ) -> AsyncIterator[WireChunk]:
        """Each layer's chunks at version `step`, in order, each as it arrives from MemoryX."""
        await self._configured.wait()
        if self._failure is not None:
            await self._abort_with(context, self._failure)
        if drop:
            # Step `step` starts only once every CS-2 finished the one before: older versions
            # are done.
            for key in [key for key in self._weights if key[0] < step]:
                del self._weights[key]
        for layer, relay in zip(layers, self._fetch(step, layers), strict=True):
            try:
                async for chunk in relay.chunks():
                    yield chunk
                TRACE.mark("swarmx_weights_out", step, layer)
            except (grpc.aio.AioRpcError, ValueError) as err:
                await self._abort_with(context, err, layer)

    async def _abort_with(
        self, context: grpc.aio.ServicerContext, error: BaseException, layer: int | None = None
    ) -> None:
        if isinstance(error, grpc.aio.AioRpcError):
            details = f"swarmx-{self.index}: memoryx: {error.details()}"
            await context.abort(error.code(), details)
        where = "" if layer is None else f" layer {layer}:"
        await context.abort(grpc.StatusCode.INTERNAL, f"swarmx-{self.index}:{where} {error}")
        raise AssertionError("unreachable")

    def _fetch(self, step: int, layers: list[int]) -> list[LayerRelay]:
        """The layers' relays at version `step`. In a job that trains, the first request opens
        the long-lived streams from the MemoryXs; a version they do not bring (one before it,
        the final one, or any in an evaluation-only job) is fetched on its own."""
        layout = self._layout
        assert layout is not None
        if self._streamed is None:
            self._stream_from_memoryx(layout, step)
        streamed = self._streamed
        missing: dict[PeerAddress, list[int]] = {}
        keys = [(step, layer, seen) for layer, seen in occurrences(layers)]
        for key in keys:
            if key not in self._weights:
                self._weights[key] = LayerRelay()
                if streamed is None or step not in streamed:
                    missing.setdefault(layout.memoryx_of_layer(key[1]), []).append(key[1])
        for owner, owned in missing.items():
            # Every broadcast of a unit comes from its owner, so the owner's list numbers them
            # as the whole list does.
            self._start(
                self._stream_versions(owner, range(step, step + 1), owned, self._step_timeout)
            )
        return [self._weights[key] for key in keys]

    def _start(self, fetch: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(fetch)
        self._fetches.add(task)
        task.add_done_callback(self._fetches.discard)

    def _stream_from_memoryx(self, layout: JobLayout, first: int) -> None:
        """Open a stream of the training versions from `first` on (first..num_steps - 1) of its
        layers from each MemoryX. The final version is only evaluated, if at all: fetched on
        its own when asked for, never sent unasked. An evaluation-only job trains nothing."""
        if layout.mode == "eval" or first >= layout.num_steps:
            return  # nothing (left) to train: versions are fetched one at a time
        self._streamed = range(first, layout.num_steps)
        order = training_order(layout.model.num_units, layout.model.head_units)
        for owner in layout.memoryx:
            owned = [layer for layer in order if layout.memoryx_of_layer(layer) == owner]
            if owned:
                self._start(self._stream_versions(owner, self._streamed, owned, None))

    async def _stream_versions(
        self, owner: PeerAddress, versions: range, layers: list[int], deadline: float | None
    ) -> None:
        """Keep the chunks of one MemoryX's stream of `layers` at each of `versions`, in that
        order, as they arrive."""
        stub = self._channels.weight_streaming(owner.address, "weights")
        request = pb.StepWeightsRequest(
            step=versions.start, layers=layers, num_steps=len(versions)
        )
        total, received = len(versions) * len(layers), 0  # layers complete
        broadcasts = occurrences(layers)
        try:
            async for chunk in stub.stream_step_weights(request, deadline):
                version, place = divmod(received, len(layers))
                if received == total or (chunk.step, chunk.layer) != (
                    versions[version],
                    layers[place],
                ):
                    raise ValueError(f"{owner.name} sent layer {chunk.layer} out of order")
                key = (chunk.step, chunk.layer, broadcasts[place][1])
                relay = self._weights.get(key)
                if relay is None:  # here before any CS-2 asked for it
                    relay = self._weights[key] = LayerRelay()
                relay.add(chunk)
                if chunk.last:
                    TRACE.mark("swarmx_weights_in", chunk.step, chunk.layer)
                    received += 1
            if received < total:
                raise ValueError(f"{owner.name} ended the stream after {received} layers")
        except (grpc.aio.AioRpcError, ValueError) as err:
            self._fail_weights(err)

    def _fail_weights(self, error: BaseException) -> None:
        """Weights still to come fail with `error` (kept complete ones are still served), and so
        does every later request: the job is failing, and its CS-2s learn why at once instead of
        waiting for versions that will not come."""
        if self._failure is not None:
            return
        self._failure = error
        log.warning("weights fail from now on: %s", error)
        for task in self._fetches:
            task.cancel()
        for relay in self._weights.values():
            relay.fail(error)
        self._weights.clear()

    def _add_gradient(
        self,
        layout: JobLayout,
        pushes: _OutgoingPushes,
        chunk: WireChunk,
        index: int,
        expected: set[int],
    ) -> None:
        """Keep one CS-2's chunk `index` of a layer; the last one sends their sum on to MemoryX.

        Raises ValueError if the CS-2s' chunks do not match.
        """
        step, layer = chunk.step, chunk.layer
        reduction = self._reductions.setdefault(step, _StepReduction({}))
        received = reduction.received.setdefault((layer, index), {})
        if chunk.source_index in received:
            raise ValueError(f"cs2-{chunk.source_index} sent chunk {index} of layer {layer} twice")
        received[chunk.source_index] = chunk
        if len(received) < len(expected):
            return
        del reduction.received[layer, index]
        partial_sum = sum_chunks([received[s] for s in sorted(received)], self.index)
        pushes.queues[layout.memoryx_of_layer(layer)].put_nowait(partial_sum)
        if not partial_sum.last:
            return
        TRACE.mark("swarmx_gradient_out", step, layer)
        for key in [key for key in self._weights if key[:2] == (step, layer)]:
            del self._weights[key]  # every CS-2 is past this layer's broadcasts
        reduction.summed += 1
        if reduction.summed == layout.model.num_units:
            del self._reductions[step]

    def _open_pushes(self, layout: JobLayout) -> _OutgoingPushes:
        """A PushGradients call to each MemoryX that holds layers, fed by a queue."""
        owners = [m for m in layout.memoryx if layout.layers_of_memoryx(m.index)]
        queues: dict[PeerAddress, asyncio.Queue[WireChunk | None]] = {
            owner: asyncio.Queue() for owner in owners
        }
        acks = {
            owner: asyncio.create_task(self._push_to_memoryx(owner, queues[owner]))
            for owner in owners
        }
        for ack in acks.values():
            ack.add_done_callback(self._push_ended)
        return _OutgoingPushes(queues, acks)

    def _push_ended(self, ack: asyncio.Task[None]) -> None:
        """A push to a MemoryX that failed fails the weights still to come: the next versions
        would never come, and the CS-2s waiting for them learn why."""
        error = None if ack.cancelled() else ack.exception()
        if error is not None:
            self._fail_weights(error)

    async def _push_to_memoryx(
        self, owner: PeerAddress, queue: asyncio.Queue[WireChunk | None]
    ) -> None:
        async def chunks() -> AsyncIterator[WireChunk]:
            while (chunk := await queue.get()) is not _END:
                assert chunk is not None
                yield chunk

        stub = self._channels.weight_streaming(owner.address, "gradients")
        await stub.push_gradients(chunks(), None)
