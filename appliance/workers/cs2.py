"""CS-2: runs one step of its shard of the global batch, one streamed unit (layer) at a time.

Forward: each unit's weights stream in from this CS-2's SwarmX; the next unit's weights are
fetched while the current unit computes (compute runs in a worker thread so the stream keeps
flowing). Backward: in reverse unit order; each unit's gradient is pushed to the SwarmX as soon
as it is complete while backward carries on (see appliance.workers.model for tied weights).
The gradient is that of (sum of this shard's losses) / (predictions in the global batch), so the
shards' gradients add up to the gradient of the global mean loss. The weights of a step are
dropped when the step ends; between steps a CS-2 holds nothing.

Evaluation steps run forward and the loss only, on the CS-2's shard of an evaluation batch.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import grpc

from appliance._proto.v1 import dataplane_pb2 as pb
from appliance._proto.v1 import dataplane_pb2_grpc
from appliance.workers.channels import PeerChannels
from appliance.workers.control import ControlPlane
from appliance.workers.lifecycle import StopSignal
from appliance.workers.model import Batch, Tensors, backward_units
from appliance.workers.tensors import TRAFFIC, collect_layer, encode_layer
from appliance.workers.topology import JobLayout

log = logging.getLogger(__name__)


class CS2Role(dataplane_pb2_grpc.StepExecutionServicer):
    """The cs2 role: StepExecution servicer, a WeightStreaming client of its SwarmX."""

    def __init__(self, index: int, step_timeout: float) -> None:
        self.index = index
        self._step_timeout = step_timeout
        self._channels = PeerChannels()
        self._layout: JobLayout | None = None
        self._configured = asyncio.Event()

    def add_services(self, server: grpc.aio.Server) -> None:
        dataplane_pb2_grpc.add_StepExecutionServicer_to_server(self, server)

    def configure(self, layout: JobLayout) -> None:
        if self._layout is None:
            self._layout = layout
            self._configured.set()
            log.info("streaming through %s", layout.swarmx_of_cs2(self.index).name)

    async def run(self, control: ControlPlane, stop: StopSignal) -> None:
        await asyncio.Future()  # serve until stopped

    async def close(self) -> None:
        log.info("tensor traffic sent: %s", json.dumps(TRAFFIC.sent))
        await self._channels.close()

    async def RunStep(
        self, request: pb.RunStepRequest, context: grpc.aio.ServicerContext
    ) -> pb.RunStepResult:
        await self._configured.wait()
        layout = self._layout
        assert layout is not None
        swarmx = layout.swarmx_of_cs2(self.index)
        stub = dataplane_pb2_grpc.WeightStreamingStub(self._channels.get(swarmx.address))
        try:
            return await _StepRun(layout, self.index, stub, self._step_timeout).run(request)
        except grpc.aio.AioRpcError as err:
            await context.abort(
                err.code(), f"cs2-{self.index} step {request.step}: {swarmx.name}: {err.details()}"
            )
            raise AssertionError("unreachable") from err


class _StepRun:
    """One RunStep call: the weights streamed in and the activations kept for backward."""

    def __init__(
        self,
        layout: JobLayout,
        index: int,
        stub: dataplane_pb2_grpc.WeightStreamingStub,
        timeout: float,
    ) -> None:
        self.layout = layout
        self.model = layout.model
        self.index = index
        self.stub = stub
        self.timeout = timeout
        self.weights: dict[int, Tensors] = {}

    async def run(self, request: pb.RunStepRequest) -> pb.RunStepResult:
        model, count = self.model, len(self.layout.cs2)
        if request.evaluate:
            batch = model.eval_batch(request.eval_batch).shard(self.index, count)
        else:
            batch = model.train_batch(request.step).shard(self.index, count)
        outputs, caches = await self._forward(request.step, batch)
        normalizer = model.batch_size * model.predictions_per_sample
        head = await asyncio.to_thread(
            model.head, outputs, self.weights, batch.targets, normalizer, not request.evaluate
        )
        if not request.evaluate:
            await self._backward(request.step, caches, head)
        return pb.RunStepResult(
            loss_sum=head.loss_sum,
            num_samples=batch.num_samples,
            num_predictions=head.num_predictions,
            num_correct=head.num_correct,
        )

    async def _fetch(self, version: int, unit: int) -> Tensors:
        request = pb.WeightsRequest(step=version, layer=unit)
        streamed = await collect_layer(self.stub.StreamWeights(request, timeout=self.timeout))
        return streamed.tensors

    async def _forward(self, version: int, batch: Batch) -> tuple[Any, list[Any]]:
        caches: list[Any] = []
        outputs: Any = batch.inputs
        upcoming = asyncio.ensure_future(self._fetch(version, 0))
        try:
            for unit in range(self.model.num_units):
                self.weights[unit] = await upcoming
                if unit + 1 < self.model.num_units:  # prefetch while this unit computes
                    upcoming = asyncio.ensure_future(self._fetch(version, unit + 1))
                outputs, cache = await asyncio.to_thread(
                    self.model.forward_unit, unit, self.weights[unit], outputs
                )
                caches.append(cache)
        finally:
            upcoming.cancel()
        return outputs, caches

    async def _backward(self, step: int, caches: list[Any], head: Any) -> None:
        pushes: list[asyncio.Future[pb.GradientAck]] = []
        gradients = backward_units(self.model, self.weights, caches, head)
        try:
            while True:
                item = await asyncio.to_thread(next, gradients, None)
                if item is None:
                    break
                unit, grads = item
                chunks = TRAFFIC.counted("gradients", encode_layer(step, unit, self.index, grads))
                pushes.append(
                    asyncio.ensure_future(self.stub.PushGradients(chunks, timeout=self.timeout))
                )
            await asyncio.gather(*pushes)
        finally:
            for push in pushes:
                push.cancel()
