"""A pipelined CS-2: the whole model on one wafer, nothing streamed (the article's pipelined mode).

The plan gives a pipelined job a chief, one CS-2 and (on a data set) its input workers: no
MemoryX, no SwarmX. The CS-2 holds every layer's weights and optimizer state in a MemoryX of
its own (appliance.workers.roles.memoryx, in this process): the same initialisation, the same
checkpoint loading, the same update of each layer as soon as its gradient is complete (or, with
clipping, when the chief's ApplyUpdates comes), with the gradient handed over as MemoryX takes
one SwarmX's sum. So a pipelined job ends with exactly the weights of the 1-CS-2
weight-streaming job and of the single-process reference. To the chief the CS-2 is the job's
one MemoryX (topology.JobLayout.pipelined): GradientNorms, ApplyUpdates and the checkpoints'
StreamWeights reach it through `WaferStore`, which a weight-streaming CS-2 serves too and
refuses. A RunStep does the whole step (forward, loss, backward, each update) before it answers;
the next step waits for the layers' versions, as a weight-streaming step waits for its weights.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, NoReturn

import grpc

from appliance._proto.v1 import dataplane_pb2 as pb
from appliance._proto.v1 import dataplane_pb2_grpc
from appliance.workers.models.model import Batch, backward_one
from appliance.workers.roles.cs2_feed import CS2Input
from appliance.workers.roles.memoryx import MemoryXRole
from appliance.workers.step_trace import TRACE
from appliance.workers.topology import JobLayout
from appliance.workers.transport.wire import WireChunk


class WaferStore(dataplane_pb2_grpc.UpdateControlServicer):
    """What a CS-2 serves the chief as MemoryX: a pipelined one's layers; a streaming one has
    none (its weights are on MemoryX) and says so."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.layers: MemoryXRole | None = None

    def hold(self, layout: JobLayout) -> MemoryXRole:
        """Initialise (or load from the checkpoint the attempt resumes from) every layer."""
        if self.layers is None:
            layers = MemoryXRole(0)
            layers.configure(layout)
            self.layers = layers
        return self.layers

    async def _held(self, context: grpc.aio.ServicerContext) -> MemoryXRole:
        if self.layers is None:
            await _refuse(context, f"cs2-{self.index} holds no layers: its job streams them")
        assert self.layers is not None
        return self.layers

    async def StreamWeights(
        self, request: pb.WeightsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[WireChunk]:
        async for chunk in (await self._held(context)).StreamWeights(request, context):
            yield chunk

    async def StreamStepWeights(
        self, request: pb.StepWeightsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[WireChunk]:
        await _refuse(context, f"cs2-{self.index} streams no weights to anyone")
        yield WireChunk(0, 0, 0, (), last=True)  # unreachable: makes this a generator

    async def PushGradients(
        self, request_iterator: AsyncIterator[WireChunk], context: grpc.aio.ServicerContext
    ) -> pb.GradientAck:
        await _refuse(context, f"cs2-{self.index} takes no gradients from anyone")

    async def GradientNorms(
        self, request: pb.GradientNormsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GradientNormsResponse:
        return await (await self._held(context)).GradientNorms(request, context)

    async def ApplyUpdates(
        self, request: pb.ApplyUpdatesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ApplyUpdatesResponse:
        return await (await self._held(context)).ApplyUpdates(request, context)


async def _refuse(context: grpc.aio.ServicerContext, why: str) -> NoReturn:
    await context.abort(grpc.StatusCode.FAILED_PRECONDITION, why)
    raise AssertionError("unreachable")


async def run_pipelined_step(
    layout: JobLayout,
    index: int,
    layers: MemoryXRole,
    feed: CS2Input | None,
    request: pb.RunStepRequest,
) -> pb.RunStepResult:
    """One whole step (or evaluation batch) on the wafer's own weights at version `step`."""
    model = layout.model
    if not request.evaluate:
        TRACE.mark("cs2_step_start", request.step)
    fed = None
    if feed is not None and feed.feeds(request.evaluate):
        fed = await feed.batch(request)
        batch = fed.batch
    else:  # on the event loop: no weights are in flight to overlap with a thread's work
        batch = (
            model.eval_batch(request.eval_batch)
            if request.evaluate
            else model.train_batch(request.step)
        )
    weights = await layers.weights_at(request.step)
    caches: list[Any] = []
    outputs: Any = batch.inputs
    for unit in range(model.num_units):
        outputs, cache = model.forward_unit(unit, weights[unit], outputs)
        caches.append(cache)
    samples = model.batch_size if fed is None else fed.global_samples
    head = model.head(
        outputs,
        {u: weights[u] for u in model.head_units},
        batch.targets,
        samples * model.predictions_per_sample,
        not request.evaluate,
    )
    result = _result(batch, head, layers.weight_bytes)
    if request.evaluate:
        return result
    if fed is not None:
        result.position.CopyFrom(fed.position)
        result.next_position.CopyFrom(fed.next_position)
    grad = head.grad
    for unit in reversed(range(model.num_units)):
        grads, grad = backward_one(model, unit, weights[unit], caches[unit], grad, head)
        caches[unit] = None
        # Applied at once (the unit's weights are not read again this step), as MemoryX does.
        await layers.add_gradient(request.step, unit, grads)
        TRACE.mark("cs2_gradient_out", request.step, unit)
    return result


def _result(batch: Batch, head: Any, weight_bytes: int) -> pb.RunStepResult:
    return pb.RunStepResult(
        loss_sum=head.loss_sum,
        num_samples=batch.num_samples,
        num_predictions=head.num_predictions,
        num_correct=head.num_correct,
        peak_weight_bytes=weight_bytes,  # the whole model, all the time
    )
