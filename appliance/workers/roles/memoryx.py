"""MemoryX: holds the weights and optimizer state of its layers (layer l on memoryx-(l % M)).

A layer's weights carry a version, the number of updates applied. StreamWeights(step=k) and
StreamStepWeights(step=k) send a layer once it reaches version k; StreamStepWeights with
num_steps = n sends versions k..k + n - 1, each as soon as it is reached (SwarmX keeps one such
call open for a whole training run), each layer as often as the request lists it (forward and
again for backward: a layer is only updated once every CS-2 has computed its gradient, which
needs its backward broadcast, so that broadcast always finds the version it asks for).
A PushGradients stream carries one SwarmX's partial sums of one or more layers of one or more
steps; once every feeding SwarmX delivered its partial sum of a layer, they are added in SwarmX
index order (so the result does not depend on arrival order). Without clipping the update is
applied right away, with the learning rate of step k's schedule, and the layer's version moves to k
+ 1 while backward still runs on lower layers. With global-norm clipping (which needs every layer
of every MemoryX) the sum and its squared norm are kept, and updates are a second phase driven by
the chief: GradientNorms reports the squared norms, then ApplyUpdates applies the optimizer with
the step's learning rate and clip scale; GradientNorms waits until every layer holds its sum (the
pushes are not answered per step). A push is answered once each of its layers holds its sum
(clipping) or is updated.
Optimizer state never leaves MemoryX except into a checkpoint.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import grpc

from appliance._proto.v1 import dataplane_pb2 as pb
from appliance._proto.v1 import dataplane_pb2_grpc
from appliance.domain.params import OptimizerSection
from appliance.workers import checkpoints
from appliance.workers.control import ControlPlane
from appliance.workers.lifecycle import StopSignal
from appliance.workers.models import optimizers
from appliance.workers.models.model import Array, Tensors
from appliance.workers.step_trace import TRACE
from appliance.workers.topology import JobLayout
from appliance.workers.transport.tensors import TRAFFIC, LayerTensors, encode_layer, read_layers
from appliance.workers.transport.weight_rpc import add_weight_streaming
from appliance.workers.transport.wire import WireChunk

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


class MemoryXRole(dataplane_pb2_grpc.UpdateControlServicer):
    """The memoryx role: WeightStreaming and UpdateControl over the layers it owns."""

    def __init__(self, index: int) -> None:
        self.index = index
        self._layers: dict[int, LayerShard] = {}
        self._optimizer = OptimizerSection()
        self._expected_sources: frozenset[int] = frozenset()
        self._num_steps = 0
        self._configured = asyncio.Event()
        self._push_failure: str | None = None  # why a push broke off, once one has
        self._wakeups: set[asyncio.Future[None]] = set()

    def add_services(self, server: grpc.aio.Server) -> None:
        add_weight_streaming(self, server)
        dataplane_pb2_grpc.add_UpdateControlServicer_to_server(self, server)

    def configure(self, layout: JobLayout) -> None:
        """Initialise (or load from the checkpoint the attempt resumes from) the layers this
        replica owns."""
        if self._configured.is_set():
            return  # the chief may retry Configure; the first topology stands
        params = layout.params
        self._optimizer = params.optimizer
        self._num_steps = layout.num_steps
        resume = layout.resume_from
        loaded = self._load(resume, layout) if resume else None
        for layer in layout.layers_of_memoryx(self.index):
            if loaded is not None:
                weights, state = loaded.weights[layer], loaded.states.get(layer, {})
                self._layers[layer] = LayerShard(weights, state, version=loaded.step)
            else:
                weights = layout.model.init_unit(layer)
                state = optimizers.initial_state(self._optimizer, weights)
                self._layers[layer] = LayerShard(weights, state)
        # A pipelined CS-2 hands its own gradients over as the one source, 0.
        self._expected_sources = frozenset([0] if layout.pipelined else layout.feeding_swarmx())
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
        TRAFFIC.report(log)
        TRACE.write(f"memoryx-{self.index}")

    async def StreamWeights(
        self, request: pb.WeightsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[WireChunk]:
        tensors = await self._weights_at(request.step, request.layer, context)
        if request.with_optimizer_state:
            shard = self._layers[request.layer]
            for slot, state in shard.state.items():
                tensors.update({f"{slot}/{name}": array for name, array in state.items()})
        for chunk in encode_layer(request.step, request.layer, self.index, tensors):
            yield chunk

    async def StreamStepWeights(
        self, request: pb.StepWeightsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[WireChunk]:
        for version in range(request.step, request.step + max(request.num_steps, 1)):
            for layer in request.layers:
                tensors = await self._weights_at(version, layer, context)
                TRACE.mark("memoryx_weights_out", version, layer)
                for chunk in encode_layer(version, layer, self.index, tensors):
                    yield chunk

    async def PushGradients(
        self, request_iterator: AsyncIterator[WireChunk], context: grpc.aio.ServicerContext
    ) -> pb.GradientAck:
        pushed: dict[int, tuple[int, LayerShard]] = {}  # layer -> its last step pushed
        failure: str | None = "a SwarmX's gradient push broke off"  # until it ends well
        try:
            async for partial in read_layers(request_iterator):
                TRACE.mark("memoryx_gradient_in", partial.step, partial.layer)
                shard = await self._shard(partial.layer, context)
                refused = await self._add_partial_sum(shard, partial)
                if refused is not None:
                    failure = refused
                    await context.abort(grpc.StatusCode.FAILED_PRECONDITION, refused)
                pushed[partial.layer] = (partial.step, shard)
            failure = None
        except ValueError as err:
            failure = str(err)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, failure)
            raise AssertionError("unreachable") from err
        finally:
            if failure is not None:
                self._push_failed(failure)
        for step, shard in pushed.values():
            await self._taken(shard, step)
        return pb.GradientAck(accepted=True)

    @property
    def _clipping(self) -> bool:
        """With clipping, updates wait for the chief's clip scale (ApplyUpdates)."""
        return self._optimizer.max_gradient_norm is not None

    async def _taken(self, shard: LayerShard, step: int) -> None:
        """Until the layer holds its full sum for `step` (clipping) or is updated past it."""
        async with shard.changed:
            await shard.changed.wait_for(
                lambda: shard.version > step or (self._clipping and shard.gradient is not None)
            )

    async def _weights_at(
        self, version: int, layer: int, context: grpc.aio.ServicerContext
    ) -> dict[str, Array]:
        """The layer's weights once it reaches `version` (aborts if it is already past it)."""
        shard = await self._shard(layer, context)
        async with shard.changed:
            await shard.changed.wait_for(lambda: shard.version >= version)
            if shard.version != version:
                await context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"layer {layer} is at version {shard.version}, not {version}",
                )
            return dict(shard.weights)

    async def weights_at(self, version: int) -> dict[int, Tensors]:
        """Every held layer's weights (not copies) once it reaches `version`: what a pipelined
        CS-2 computes with. Raises ValueError if a layer is past it."""
        held = {}
        for layer, shard in sorted(self._layers.items()):
            async with shard.changed:
                await shard.changed.wait_for(lambda: shard.version >= version)  # noqa: B023
                if shard.version != version:
                    raise ValueError(f"layer {layer} is at version {shard.version}, not {version}")
                held[layer] = shard.weights
        return held

    async def add_gradient(self, step: int, layer: int, gradient: Tensors) -> None:
        """A pipelined CS-2's gradient of one layer, taken as the one source's sum (then
        applied, or kept for the clip as a SwarmX's would be). Raises ValueError if refused."""
        refused = await self._add_partial_sum(
            self._layers[layer], LayerTensors(step, layer, 0, gradient)
        )
        if refused is not None:
            raise ValueError(refused)

    @property
    def layers(self) -> list[int]:
        return sorted(self._layers)

    @property
    def weight_bytes(self) -> int:
        """The bytes of the weights held (a pipelined wafer's every layer)."""
        return sum(int(a.nbytes) for s in self._layers.values() for a in s.weights.values())

    async def _add_partial_sum(self, shard: LayerShard, partial: LayerTensors) -> str | None:
        """Keep one SwarmX's partial sum; the last one completes the layer's gradient.

        Returns why the partial sum is refused, if it is.
        """
        async with shard.changed:
            if partial.step != shard.version or shard.gradient is not None:
                return (
                    f"gradient for step {partial.step} but layer {partial.layer} is at "
                    f"version {shard.version}"
                )
            if partial.source_index not in self._expected_sources:
                return f"unexpected swarmx-{partial.source_index}"
            shard.partial_sums[partial.source_index] = partial.tensors
            if set(shard.partial_sums) != self._expected_sources:
                return None
            sources = sorted(shard.partial_sums)
            shard.gradient = {
                name: sum_in_order([shard.partial_sums[s][name] for s in sources])
                for name in shard.weights
            }
            shard.partial_sums.clear()
            if self._clipping:
                shard.squared_norm = optimizers.squared_norm(shard.gradient)
                shard.changed.notify_all()
                return None
        learning_rate = optimizers.learning_rate_at(self._optimizer, partial.step, self._num_steps)
        await self._apply(partial.layer, shard, partial.step, learning_rate, 1.0)
        return None

    async def _apply(
        self, layer: int, shard: LayerShard, step: int, learning_rate: float, gradient_scale: float
    ) -> None:
        """Apply the step's update to one layer; its version moves to step + 1."""
        assert shard.gradient is not None
        # On the event loop: an update is a few array operations, cheaper than a thread hand-off.
        optimizers.apply_update(
            self._optimizer,
            shard.weights,
            shard.gradient,
            shard.state,
            step,
            learning_rate,
            gradient_scale,
        )
        TRACE.mark("memoryx_updated", step, layer)
        async with shard.changed:
            shard.gradient = None
            shard.version += 1
            shard.changed.notify_all()

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
        for layer, shard in (await self._complete(request.step, context)).items():
            await self._apply(
                layer, shard, request.step, request.learning_rate, request.gradient_scale
            )
        return pb.ApplyUpdatesResponse()

    async def _complete(
        self, step: int, context: grpc.aio.ServicerContext
    ) -> dict[int, LayerShard]:
        """Every held layer, once each has its summed gradient for `step`."""
        await self._configured.wait()
        for layer, shard in self._layers.items():
            await self._summed_or_past(shard, step)
            if self._push_failure is not None:
                await context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"memoryx-{self.index}: {self._push_failure}: step {step} will not be summed",
                )
            if shard.version != step or shard.gradient is None:
                await context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"layer {layer} has no complete gradient for step {step} "
                    f"(version {shard.version})",
                )
        return self._layers

    async def _summed_or_past(self, shard: LayerShard, step: int) -> None:
        """Until the layer holds its summed gradient, is at another version than `step`, or a
        push broke off (its sums would never come)."""
        async with shard.changed:
            await shard.changed.wait_for(
                lambda: (
                    shard.version != step
                    or shard.gradient is not None
                    or self._push_failure is not None
                )
            )

    def _push_failed(self, failure: str) -> None:
        """Remember the first push that broke off and wake whoever waits for a sum."""
        if self._push_failure is None:
            self._push_failure = failure
            log.warning("a gradient push failed: %s", failure)
        for shard in self._layers.values():
            wakeup = asyncio.ensure_future(_notify(shard.changed))
            self._wakeups.add(wakeup)
            wakeup.add_done_callback(self._wakeups.discard)

    async def _shard(self, layer: int, context: grpc.aio.ServicerContext) -> LayerShard:
        await self._configured.wait()
        shard = self._layers.get(layer)
        if shard is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"layer {layer} is not held by memoryx-{self.index}"
            )
            raise AssertionError("unreachable")
        return shard


async def _notify(condition: asyncio.Condition) -> None:
    async with condition:
        condition.notify_all()


def sum_in_order(arrays: list[Array]) -> Array:
    """Add arrays left to right in float32, so the order (not arrival) fixes the rounding.

    A single array is returned as it is (no copy; the sum is only read).
    """
    if len(arrays) == 1:
        return arrays[0]
    total = arrays[0].copy()
    for array in arrays[1:]:
        total += array
    return total
