"""SwarmX: broadcasts each layer's weights to its CS-2s and reduces their gradients.

Weights: the first CS-2 asking for a step's layers (one StreamStepWeights stream per step) has them
fetched once from their MemoryXs, one stream per MemoryX carrying its layers in the order asked
for; every CS-2 gets the same chunks, each chunk as soon as it has arrived. Gradients: each CS-2
pushes one stream per step, its layers' gradients in backward order; once all of this SwarmX's
CS-2s have pushed chunk i of a layer, their chunks are added in CS-2 index order and the sum goes
on at once, as chunk i of one partial sum, into this step's stream to the owning MemoryX (one per
MemoryX and step, opened when a CS-2's push for the step arrives, before its first gradient, so the
call is set up by the time the first sum goes out). Relaying and reducing chunk by chunk
(appliance.workers.relay) lets the hops of a big layer overlap. A CS-2's push is answered once
MemoryX has taken every layer it carried (appliance.workers.memoryx), so a CS-2's step ends only
when its gradients are in.

The first gradient of step k also starts fetching the weights of step k + 1 (unless k is the
job's last step), last unit first (appliance.workers.topology.weight_order): MemoryX sends each
layer as soon as its update is applied, while backward goes on, so the next step's weights are
here before its RunStep starts. A cached layer is dropped once every CS-2 pushed its gradient
for it (they are all past its forward pass), and every older version once a CS-2 asks for a
newer one; weights fetched for evaluation at version k are the ones training step k uses.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import AsyncIterator

import grpc

from appliance._proto.v1 import dataplane_pb2 as pb
from appliance.workers.channels import PeerChannels
from appliance.workers.control import ControlPlane
from appliance.workers.lifecycle import StopSignal
from appliance.workers.relay import ChunkOrder, LayerRelay, sum_chunks
from appliance.workers.step_trace import TRACE
from appliance.workers.tensors import TRAFFIC
from appliance.workers.topology import JobLayout, PeerAddress, weight_order
from appliance.workers.weight_rpc import WeightStreamingClient, add_weight_streaming
from appliance.workers.wire import WireChunk

log = logging.getLogger(__name__)

LayerKey = tuple[int, int]  # (step, layer)
_END = None  # closes an outgoing gradient stream
# A step's streams to the MemoryXs: the queue feeding each, and each one's answer.
_OpenPushes = tuple[
    dict[PeerAddress, "asyncio.Queue[WireChunk | None]"], dict[PeerAddress, "asyncio.Task[None]"]
]


@dataclasses.dataclass
class _StepReduction:
    """One step's gradients: what the CS-2s pushed so far, one outgoing stream per MemoryX."""

    received: dict[tuple[int, int], dict[int, WireChunk]]  # (layer, chunk) -> cs2 -> chunk
    outgoing: dict[PeerAddress, asyncio.Queue[WireChunk | None]]
    remaining: dict[PeerAddress, int]  # layers still to send to each MemoryX
    acks: dict[PeerAddress, asyncio.Task[None]]  # each stream's answer from its MemoryX


class SwarmXRole:
    """The swarmx role: WeightStreaming towards CS-2s, a client of MemoryX."""

    def __init__(self, index: int, step_timeout: float) -> None:
        self.index = index
        self._step_timeout = step_timeout
        self._channels = PeerChannels()
        self._layout: JobLayout | None = None
        self._configured = asyncio.Event()
        self._weights: dict[LayerKey, LayerRelay] = {}
        self._fetches: set[asyncio.Task[None]] = set()
        self._reductions: dict[int, _StepReduction] = {}
        # Pushes to the MemoryXs opened ahead of the step that will use them (see PushGradients).
        self._spare_pushes: _OpenPushes | None = None

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
        log.info("tensor traffic sent: %s", json.dumps(TRAFFIC.sent))
        TRACE.write(f"swarmx-{self.index}")
        for task in self._fetches:
            task.cancel()
        for reduction in self._reductions.values():
            for ack in reduction.acks.values():
                ack.cancel()
        if self._spare_pushes is not None:
            for ack in self._spare_pushes[1].values():
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
        async for chunk in self._relay(request.step, list(request.layers), context):
            yield chunk

    async def PushGradients(
        self, request_iterator: AsyncIterator[WireChunk], context: grpc.aio.ServicerContext
    ) -> pb.GradientAck:
        await self._configured.wait()
        layout = self._layout
        assert layout is not None
        expected = set(layout.cs2_of_swarmx(self.index))
        if self._spare_pushes is None:
            # A CS-2 opens its push when its step starts: open the pushes to the MemoryXs now,
            # so their calls are set up before the first gradient instead of after it.
            self._spare_pushes = self._open_pushes(layout)
        waits: dict[tuple[int, PeerAddress], asyncio.Task[None]] = {}
        order = ChunkOrder()
        try:
            async for chunk in request_iterator:
                if chunk.source_index not in expected:
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT, f"cs2-{chunk.source_index} is not mine"
                    )
                index = order.index_of(chunk)
                if chunk.last:
                    TRACE.mark("swarmx_gradient_in", chunk.step, chunk.layer)
                reduction = self._reduction(layout, chunk.step)
                owner = layout.memoryx_of_layer(chunk.layer)
                waits[(chunk.step, owner)] = reduction.acks[owner]
                self._add_gradient(layout, reduction, chunk, index, expected)
            if order.inside_layer:
                raise ValueError("the gradient stream ended inside a layer")
        except ValueError as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
            raise AssertionError("unreachable") from err
        for ack in waits.values():
            try:
                await asyncio.shield(ack)
            except grpc.aio.AioRpcError as err:
                await context.abort(err.code(), f"swarmx-{self.index}: memoryx: {err.details()}")
        return pb.GradientAck(accepted=True)

    async def _relay(
        self, step: int, layers: list[int], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[WireChunk]:
        """Each layer's chunks at version `step`, in order, each as it arrives from MemoryX."""
        await self._configured.wait()
        # Step `step` starts only once every CS-2 finished the one before: older versions are done.
        for key in [key for key in self._weights if key[0] < step]:
            del self._weights[key]
        for layer, relay in zip(layers, self._fetch(step, layers), strict=True):
            try:
                async for chunk in relay.chunks():
                    yield chunk
                TRACE.mark("swarmx_weights_out", step, layer)
            except grpc.aio.AioRpcError as err:
                await context.abort(err.code(), f"swarmx-{self.index}: memoryx: {err.details()}")
                raise AssertionError("unreachable") from err
            except ValueError as err:
                await context.abort(grpc.StatusCode.INTERNAL, f"layer {layer}: {err}")
                raise AssertionError("unreachable") from err

    def _fetch(self, step: int, layers: list[int]) -> list[LayerRelay]:
        """The layers' relays, fetching the missing ones (one stream per MemoryX)."""
        layout = self._layout
        assert layout is not None
        missing: dict[PeerAddress, list[int]] = {}
        for layer in layers:
            if (step, layer) not in self._weights:
                self._weights[step, layer] = LayerRelay()
                missing.setdefault(layout.memoryx_of_layer(layer), []).append(layer)
        for owner, owned in missing.items():
            relays = [self._weights[step, layer] for layer in owned]
            task = asyncio.create_task(self._fetch_from_memoryx(owner, step, owned, relays))
            self._fetches.add(task)
            task.add_done_callback(self._fetches.discard)
        return [self._weights[step, layer] for layer in layers]

    async def _fetch_from_memoryx(
        self, owner: PeerAddress, step: int, layers: list[int], relays: list[LayerRelay]
    ) -> None:
        stub = WeightStreamingClient(self._channels.get(owner.address, "weights"))
        request = pb.StepWeightsRequest(step=step, layers=layers)
        received = 0  # layers complete
        try:
            async for chunk in stub.stream_step_weights(request, self._step_timeout):
                if received == len(layers) or chunk.layer != layers[received]:
                    raise ValueError(f"{owner.name} sent layer {chunk.layer} out of order")
                relays[received].add(chunk)
                if chunk.last:
                    TRACE.mark("swarmx_weights_in", step, chunk.layer)
                    received += 1
            if received < len(layers):
                raise ValueError(f"{owner.name} ended the stream after {received} layers")
        except (grpc.aio.AioRpcError, ValueError) as err:
            for layer, relay in zip(layers[received:], relays[received:], strict=True):
                relay.fail(err)
                if self._weights.get((step, layer)) is relay:
                    del self._weights[step, layer]  # a later request fetches it afresh

    def _reduction(self, layout: JobLayout, step: int) -> _StepReduction:
        """The step's reduction, opening its streams to the MemoryXs on first use."""
        reduction = self._reductions.get(step)
        if reduction is not None:
            return reduction
        outgoing, acks = self._take_spare_pushes() or self._open_pushes(layout)
        owners = list(outgoing)
        remaining = {owner: len(layout.layers_of_memoryx(owner.index)) for owner in owners}
        reduction = _StepReduction({}, outgoing, remaining, acks)
        self._reductions[step] = reduction
        if step + 1 < layout.num_steps:
            # The next step's weights: MemoryX sends each layer as soon as this step's update
            # of it is applied, so the next step finds them here instead of waiting two hops.
            self._fetch(step + 1, weight_order(layout.model.num_units))
        finished = asyncio.gather(*acks.values(), return_exceptions=True)
        finished.add_done_callback(lambda _: self._reductions.pop(step, None))
        return reduction

    def _add_gradient(
        self,
        layout: JobLayout,
        reduction: _StepReduction,
        chunk: WireChunk,
        index: int,
        expected: set[int],
    ) -> None:
        """Keep one CS-2's chunk `index` of a layer; the last one sends their sum on to MemoryX.

        Raises ValueError if the CS-2s' chunks do not match.
        """
        step, layer = chunk.step, chunk.layer
        received = reduction.received.setdefault((layer, index), {})
        if chunk.source_index in received:
            raise ValueError(f"cs2-{chunk.source_index} sent chunk {index} of layer {layer} twice")
        received[chunk.source_index] = chunk
        if len(received) < len(expected):
            return
        del reduction.received[layer, index]
        partial_sum = sum_chunks([received[s] for s in sorted(received)], self.index)
        owner = layout.memoryx_of_layer(layer)
        queue = reduction.outgoing[owner]
        queue.put_nowait(partial_sum)
        if not partial_sum.last:
            return
        TRACE.mark("swarmx_gradient_out", step, layer)
        self._weights.pop((step, layer), None)  # every CS-2 is past this layer's forward pass
        reduction.remaining[owner] -= 1
        if reduction.remaining[owner] == 0:
            queue.put_nowait(_END)

    def _take_spare_pushes(self) -> _OpenPushes | None:
        """The pushes opened ahead, unless one of them already ended (its deadline passed
        while no step needed it, e.g. during evaluation): those are dropped."""
        spares, self._spare_pushes = self._spare_pushes, None
        if spares is None:
            return None
        acks = spares[1].values()
        if not any(ack.done() for ack in acks):
            return spares
        for ack in acks:
            ack.cancel()
            if ack.done() and not ack.cancelled():
                ack.exception()  # retrieved: it only ended a stream nobody used
        return None

    def _open_pushes(self, layout: JobLayout) -> _OpenPushes:
        """A PushGradients call to each MemoryX that holds layers, fed by a queue."""
        owners = [m for m in layout.memoryx if layout.layers_of_memoryx(m.index)]
        outgoing: dict[PeerAddress, asyncio.Queue[WireChunk | None]] = {
            owner: asyncio.Queue() for owner in owners
        }
        acks = {
            owner: asyncio.create_task(self._push_to_memoryx(owner, outgoing[owner]))
            for owner in owners
        }
        return outgoing, acks

    async def _push_to_memoryx(
        self, owner: PeerAddress, queue: asyncio.Queue[WireChunk | None]
    ) -> None:
        async def chunks() -> AsyncIterator[WireChunk]:
            while (chunk := await queue.get()) is not _END:
                assert chunk is not None
                yield chunk

        stub = WeightStreamingClient(self._channels.get(owner.address, "gradients"))
        await stub.push_gradients(chunks(), self._step_timeout)
