"""SwarmX: broadcasts each layer's weights to its CS-2s and reduces their gradients.

Weights: the first StreamWeights(step, layer) from any of this SwarmX's CS-2s fetches the layer
once from its MemoryX; the other CS-2s get the same chunks. Gradients: each CS-2 pushes its
gradient for (step, layer); when all of this SwarmX's CS-2s have pushed, they are added in CS-2
index order and the sum goes to the owning MemoryX as one partial sum. Every push is answered
once MemoryX holds the layer's full gradient, so a CS-2's step ends only when its gradients are
in; the chief then has the updates applied (appliance.workers.memoryx).

A cached layer is dropped once every CS-2 pushed its gradient for it (they are all past its
forward pass); weights fetched for evaluation at version k are the ones training step k uses.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator

import grpc

from appliance._proto.v1 import dataplane_pb2 as pb
from appliance._proto.v1 import dataplane_pb2_grpc
from appliance.workers.channels import PeerChannels
from appliance.workers.control import ControlPlane
from appliance.workers.lifecycle import StopSignal
from appliance.workers.memoryx import sum_in_order
from appliance.workers.model import Array
from appliance.workers.tensors import TRAFFIC, collect_layer, encode_layer
from appliance.workers.topology import JobLayout

log = logging.getLogger(__name__)

LayerKey = tuple[int, int]  # (step, layer)


class SwarmXRole(dataplane_pb2_grpc.WeightStreamingServicer):
    """The swarmx role: WeightStreaming towards CS-2s, a client of MemoryX."""

    def __init__(self, index: int, step_timeout: float) -> None:
        self.index = index
        self._step_timeout = step_timeout
        self._channels = PeerChannels()
        self._layout: JobLayout | None = None
        self._configured = asyncio.Event()
        self._weights: dict[LayerKey, asyncio.Task[list[pb.LayerChunk]]] = {}
        self._gradients: dict[LayerKey, dict[int, dict[str, Array]]] = {}
        self._reductions: dict[LayerKey, asyncio.Future[None]] = {}

    def add_services(self, server: grpc.aio.Server) -> None:
        dataplane_pb2_grpc.add_WeightStreamingServicer_to_server(self, server)

    def configure(self, layout: JobLayout) -> None:
        if self._layout is None:
            self._layout = layout
            self._configured.set()
            log.info("serving cs2 %s", layout.cs2_of_swarmx(self.index))

    async def run(self, control: ControlPlane, stop: StopSignal) -> None:
        await asyncio.Future()  # serve until stopped

    async def close(self) -> None:
        log.info("tensor traffic sent: %s", json.dumps(TRAFFIC.sent))
        for task in self._weights.values():
            task.cancel()
        await self._channels.close()

    async def StreamWeights(
        self, request: pb.WeightsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.LayerChunk]:
        await self._configured.wait()
        key = (request.step, request.layer)
        fetch = self._weights.get(key)
        if fetch is None:
            fetch = asyncio.create_task(self._fetch_from_memoryx(request))
            self._weights[key] = fetch
        try:
            chunks = await asyncio.shield(fetch)
        except grpc.aio.AioRpcError as err:
            await context.abort(err.code(), f"swarmx-{self.index}: memoryx: {err.details()}")
            raise AssertionError("unreachable") from err
        for chunk in chunks:
            yield TRAFFIC.count("weights", chunk)

    async def PushGradients(
        self, request_iterator: AsyncIterator[pb.LayerChunk], context: grpc.aio.ServicerContext
    ) -> pb.GradientAck:
        await self._configured.wait()
        layout = self._layout
        assert layout is not None
        try:
            gradient = await collect_layer(request_iterator)
        except ValueError as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
            raise AssertionError("unreachable") from err
        expected = set(layout.cs2_of_swarmx(self.index))
        if gradient.source_index not in expected:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"cs2-{gradient.source_index} is not mine"
            )
        key = (gradient.step, gradient.layer)
        received = self._gradients.setdefault(key, {})
        received[gradient.source_index] = gradient.tensors
        reduction = self._reductions.setdefault(key, asyncio.get_running_loop().create_future())
        if set(received) == expected:
            del self._gradients[key]
            self._weights.pop(key, None)  # every CS-2 is past this layer's forward pass
            try:
                await self._push_to_memoryx(layout, key, received)
            except grpc.aio.AioRpcError as err:
                reduction.set_exception(err)
            else:
                reduction.set_result(None)
            finally:
                del self._reductions[key]
        try:
            await asyncio.shield(reduction)
        except grpc.aio.AioRpcError as err:
            await context.abort(err.code(), f"swarmx-{self.index}: memoryx: {err.details()}")
        return pb.GradientAck(accepted=True)

    async def _fetch_from_memoryx(self, request: pb.WeightsRequest) -> list[pb.LayerChunk]:
        assert self._layout is not None
        owner = self._layout.memoryx_of_layer(request.layer)
        stub = dataplane_pb2_grpc.WeightStreamingStub(self._channels.get(owner.address))
        stream = stub.StreamWeights(request, timeout=self._step_timeout)
        return [chunk async for chunk in stream]

    async def _push_to_memoryx(
        self, layout: JobLayout, key: LayerKey, received: dict[int, dict[str, Array]]
    ) -> None:
        step, layer = key
        sources = sorted(received)
        partial_sum = {
            name: sum_in_order([received[s][name] for s in sources])
            for name in received[sources[0]]
        }
        owner = layout.memoryx_of_layer(layer)
        stub = dataplane_pb2_grpc.WeightStreamingStub(self._channels.get(owner.address))
        chunks = TRAFFIC.counted("gradients", encode_layer(step, layer, self.index, partial_sum))
        await stub.PushGradients(chunks, timeout=self._step_timeout)
