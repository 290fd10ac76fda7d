"""MemoryX: holds the weights and optimizer state of its layers (layer l on memoryx-(l % M)).

A layer's weights carry a version, the number of updates applied. StreamWeights(step=k) waits
until the layer reaches version k. PushGradients for step k stores one SwarmX's partial sum;
once every feeding SwarmX delivered its partial sum, they are added in SwarmX index order (so the
result does not depend on arrival order), the sum and its squared norm are kept, and every
waiting push is answered. Updates are a second phase driven by the chief: GradientNorms reports
the squared norms (for global-norm clipping, which needs every layer of every MemoryX), then
ApplyUpdates applies the optimizer with the step's learning rate and clip scale, and the
versions move to k + 1. Optimizer state never leaves MemoryX except into a checkpoint.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import grpc

from appliance._proto.v1 import dataplane_pb2 as pb
from appliance._proto.v1 import dataplane_pb2_grpc
from appliance.domain.params import OptimizerSection
from appliance.workers import checkpoints, optimizers
from appliance.workers.control import ControlPlane
from appliance.workers.lifecycle import StopSignal
from appliance.workers.model import Array, Tensors
from appliance.workers.tensors import TRAFFIC, collect_layer, encode_layer
from appliance.workers.topology import JobLayout

log = logging.getLogger(__name__)


@dataclasses.dataclass
class LayerShard:
    """One layer as held by MemoryX: weights, optimizer state, the step's gradient."""

    weights: Tensors
    state: optimizers.OptimizerState
    version: int = 0
    partial_sums: dict[int, Tensors] = dataclasses.field(default_factory=dict)
    gradient: Tensors | None = None
    squared_norm: float = 0.0
    changed: asyncio.Condition = dataclasses.field(default_factory=asyncio.Condition)


class MemoryXRole(
    dataplane_pb2_grpc.WeightStreamingServicer, dataplane_pb2_grpc.UpdateControlServicer
):
    """The memoryx role: WeightStreaming and UpdateControl over the layers it owns."""

    def __init__(self, index: int) -> None:
        self.index = index
        self._layers: dict[int, LayerShard] = {}
        self._optimizer = OptimizerSection()
        self._expected_sources: frozenset[int] = frozenset()
        self._configured = asyncio.Event()

    def add_services(self, server: grpc.aio.Server) -> None:
        dataplane_pb2_grpc.add_WeightStreamingServicer_to_server(self, server)
        dataplane_pb2_grpc.add_UpdateControlServicer_to_server(self, server)

    def configure(self, layout: JobLayout) -> None:
        """Initialise (or load from runconfig.checkpoint_path) the layers this replica owns."""
        if self._configured.is_set():
            return  # the chief may retry Configure; the first topology stands
        params = layout.params
        self._optimizer = params.optimizer
        resume = params.runconfig.checkpoint_path
        loaded = self._load(resume, layout) if resume else None
        for layer in layout.layers_of_memoryx(self.index):
            if loaded is not None:
                weights, state = loaded.weights[layer], loaded.states.get(layer, {})
                self._layers[layer] = LayerShard(weights, state, version=loaded.step)
            else:
                weights = layout.model.init_unit(layer)
                state = optimizers.initial_state(self._optimizer, weights)
                self._layers[layer] = LayerShard(weights, state)
        self._expected_sources = frozenset(layout.feeding_swarmx())
        self._configured.set()
        log.info("holding layers %s (%s)", sorted(self._layers), self._optimizer.optimizer_type)

    def _load(self, path: str, layout: JobLayout) -> checkpoints.Checkpoint:
        try:
            loaded = checkpoints.read_checkpoint(Path(path))
            checkpoints.check_compatible(
                loaded, layout.params.model_digest(), self._optimizer.optimizer_type
            )
        except ValueError as err:
            raise ValueError(f"cannot resume: {err}") from None
        missing = set(layout.layers_of_memoryx(self.index)) - set(loaded.weights)
        if missing:
            raise ValueError(f"cannot resume: {path} lacks layers {sorted(missing)}")
        log.info("resuming at step %d from %s", loaded.step, path)
        return loaded

    async def run(self, control: ControlPlane, stop: StopSignal) -> None:
        await asyncio.Future()  # serve until stopped

    async def close(self) -> None:
        log.info("tensor traffic sent: %s", json.dumps(TRAFFIC.sent))

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
            tensors = dict(shard.weights)
            if request.with_optimizer_state:
                for slot, state in shard.state.items():
                    tensors.update({f"{slot}/{name}": array for name, array in state.items()})
        for chunk in encode_layer(request.step, request.layer, self.index, tensors):
            yield TRAFFIC.count("weights", chunk)

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
            if partial.step != shard.version or shard.gradient is not None:
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
                sources = sorted(shard.partial_sums)
                shard.gradient = {
                    name: sum_in_order([shard.partial_sums[s][name] for s in sources])
                    for name in shard.weights
                }
                shard.squared_norm = optimizers.squared_norm(shard.gradient)
                shard.partial_sums.clear()
                shard.changed.notify_all()
            else:
                await shard.changed.wait_for(
                    lambda: shard.gradient is not None or shard.version > partial.step
                )
        return pb.GradientAck(accepted=True)

    async def GradientNorms(
        self, request: pb.GradientNormsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GradientNormsResponse:
        norms = [
            pb.LayerNorm(layer=layer, squared_norm=shard.squared_norm)
            for layer, shard in sorted((await self._complete(request.step, context)).items())
        ]
        return pb.GradientNormsResponse(layers=norms)

    async def ApplyUpdates(
        self, request: pb.ApplyUpdatesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ApplyUpdatesResponse:
        for shard in (await self._complete(request.step, context)).values():
            assert shard.gradient is not None
            await asyncio.to_thread(
                optimizers.apply_update,
                self._optimizer,
                shard.weights,
                shard.gradient,
                shard.state,
                request.step,
                request.learning_rate,
                request.gradient_scale,
            )
            async with shard.changed:
                shard.gradient = None
                shard.version += 1
                shard.changed.notify_all()
        return pb.ApplyUpdatesResponse()

    async def _complete(
        self, step: int, context: grpc.aio.ServicerContext
    ) -> dict[int, LayerShard]:
        """Every held layer, once each has its summed gradient for `step`."""
        await self._configured.wait()
        for layer, shard in self._layers.items():
            if shard.version != step or shard.gradient is None:
                await context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"layer {layer} has no complete gradient for step {step} "
                    f"(version {shard.version})",
                )
        return self._layers

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
