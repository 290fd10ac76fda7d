"""MemoryX: holds the weights of its layers (layer l on memoryx-(l % M)) and applies updates.

A layer's weights carry a version, the number of updates applied. StreamWeights(step=k) waits
until the layer reaches version k. PushGradients for step k stores one SwarmX's partial sum; once
every feeding SwarmX has delivered its partial sum, they are added in SwarmX index order (so the
result does not depend on arrival order), the SGD update is applied, the version moves to k + 1,
and every waiting push is answered.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator

import grpc

from appliance._proto.v1 import dataplane_pb2 as pb
from appliance._proto.v1 import dataplane_pb2_grpc
from appliance.workers import fc_mnist
from appliance.workers.control import ControlPlane
from appliance.workers.fc_mnist import Array
from appliance.workers.lifecycle import StopSignal
from appliance.workers.tensors import collect_layer, encode_layer
from appliance.workers.topology import JobLayout

log = logging.getLogger(__name__)


@dataclasses.dataclass
class LayerShard:
    """One layer's weights as held by MemoryX, with the partial sums for the next update."""

    weight: Array
    bias: Array
    version: int = 0
    partial_sums: dict[int, dict[str, Array]] = dataclasses.field(default_factory=dict)
    changed: asyncio.Condition = dataclasses.field(default_factory=asyncio.Condition)


class MemoryXRole(dataplane_pb2_grpc.WeightStreamingServicer):
    """The memoryx role: WeightStreaming servicer over the layers this replica owns."""

    def __init__(self, index: int) -> None:
        self.index = index
        self._layers: dict[int, LayerShard] = {}
        self._learning_rate = 0.0
        self._expected_sources: frozenset[int] = frozenset()
        self._configured = asyncio.Event()

    def add_services(self, server: grpc.aio.Server) -> None:
        dataplane_pb2_grpc.add_WeightStreamingServicer_to_server(self, server)

    def configure(self, layout: JobLayout) -> None:
        if self._configured.is_set():
            return  # the chief may retry Configure; the first topology stands
        config = layout.config
        for layer in layout.layers_of_memoryx(self.index):
            weight, bias = fc_mnist.init_layer(config.seed, layer, *config.layer_shapes[layer])
            self._layers[layer] = LayerShard(weight, bias)
        self._learning_rate = config.learning_rate
        self._expected_sources = frozenset(layout.feeding_swarmx())
        self._configured.set()
        log.info("holding layers %s, lr=%g", sorted(self._layers), self._learning_rate)

    async def run(self, control: ControlPlane, stop: StopSignal) -> None:
        await asyncio.Future()  # serve until stopped

    async def close(self) -> None:
        """MemoryX opens no channels."""

    async def StreamWeights(
        self, request: pb.WeightsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.LayerChunk]:
        shard = await self._shard(request.layer, context)
        async with shard.changed:
            await shard.changed.wait_for(lambda: shard.version >= request.step)
            if shard.version != request.step:
                await context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"layer {request.layer} is at version {shard.version}, not {request.step}",
                )
            tensors = {"weight": shard.weight, "bias": shard.bias}
        for chunk in encode_layer(request.step, request.layer, self.index, tensors):
            yield chunk

    async def PushGradients(
        self, request_iterator: AsyncIterator[pb.LayerChunk], context: grpc.aio.ServicerContext
    ) -> pb.GradientAck:
        try:
            partial = await collect_layer(request_iterator)
        except ValueError as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
            raise AssertionError("unreachable") from err
        shard = await self._shard(partial.layer, context)
        async with shard.changed:
            if partial.step != shard.version:
                await context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"gradient for step {partial.step} but layer {partial.layer} is at "
                    f"version {shard.version}",
                )
            if partial.source_index not in self._expected_sources:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT, f"unexpected swarmx-{partial.source_index}"
                )
            shard.partial_sums[partial.source_index] = partial.tensors
            if set(shard.partial_sums) == self._expected_sources:
                self._apply_update(shard)
                shard.changed.notify_all()
            else:
                await shard.changed.wait_for(lambda: shard.version > partial.step)
        return pb.GradientAck(applied=True)

    def _apply_update(self, shard: LayerShard) -> None:
        sources = sorted(shard.partial_sums)
        grad_weight = sum_in_order([shard.partial_sums[s]["weight"] for s in sources])
        grad_bias = sum_in_order([shard.partial_sums[s]["bias"] for s in sources])
        shard.weight = fc_mnist.sgd_update(shard.weight, grad_weight, self._learning_rate)
        shard.bias = fc_mnist.sgd_update(shard.bias, grad_bias, self._learning_rate)
        shard.partial_sums.clear()
        shard.version += 1

    async def _shard(self, layer: int, context: grpc.aio.ServicerContext) -> LayerShard:
        await self._configured.wait()
        shard = self._layers.get(layer)
        if shard is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"layer {layer} is not held by memoryx-{self.index}"
            )
            raise AssertionError("unreachable")
        return shard


def sum_in_order(arrays: list[Array]) -> Array:
    """Add arrays left to right in float32, so the order (not arrival) fixes the rounding."""
    total = arrays[0].copy()
    for array in arrays[1:]:
        total += array
    return total
