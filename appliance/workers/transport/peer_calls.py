"""The chief's data-plane calls to the other replicas of its job.

A failed or late call raises ReplicaExit(EXIT_PEER_FAILED) naming the replica: the chief ends,
and the coordinator judges the job by that replica's own end when it comes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from appliance._proto.v1 import control_pb2, dataplane_pb2_grpc
from appliance._proto.v1 import dataplane_pb2 as pb
from appliance.workers.lifecycle import EXIT_PEER_FAILED, ReplicaExit
from appliance.workers.models.model import Tensors
from appliance.workers.step_trace import TRACE
from appliance.workers.topology import JobLayout, PeerAddress
from appliance.workers.transport.channels import PeerChannels
from appliance.workers.transport.tensors import collect_layer

log = logging.getLogger(__name__)

T = TypeVar("T")
SHUTDOWN_TIMEOUT = 2.0
CONFIGURE_TIMEOUT = 10.0


class PeerCalls:
    """RunStep on the CS-2s; GradientNorms, ApplyUpdates and StreamWeights on the MemoryXs."""

    def __init__(self, layout: JobLayout, channels: PeerChannels, step_timeout: float) -> None:
        self.layout = layout
        self._channels = channels
        self._timeout = step_timeout

    async def configure(self, topology: control_pb2.Topology, chief: str) -> None:
        await self._all(
            self.layout.others(chief),
            lambda peer: dataplane_pb2_grpc.ReplicaLifecycleStub(self._channel(peer)).Configure(
                topology, timeout=CONFIGURE_TIMEOUT, metadata=self._channels.metadata
            ),
            "configure",
        )

    async def run_step(
        self, step: int, evaluate: bool = False, eval_batch: int = 0
    ) -> list[pb.RunStepResult]:
        """One step (or evaluation batch) on every CS-2; results in CS-2 index order."""
        request = pb.RunStepRequest(step=step, evaluate=evaluate, eval_batch=eval_batch)
        what = f"eval batch {eval_batch}" if evaluate else f"step {step}"
        if not evaluate:
            TRACE.mark("chief_run_step", step)
        results = await self._all(
            self.layout.cs2,
            lambda peer: dataplane_pb2_grpc.StepExecutionStub(self._channel(peer)).RunStep(
                request, timeout=self._timeout, metadata=self._channels.metadata
            ),
            what,
        )
        if not evaluate:
            TRACE.mark("chief_step_done", step)
        return results

    async def gradient_norms(self, step: int) -> list[float]:
        """Squared norm of every layer's summed gradient, in layer order."""
        request = pb.GradientNormsRequest(step=step)
        replies = await self._all(
            self.layout.memoryx,
            lambda peer: dataplane_pb2_grpc.UpdateControlStub(self._channel(peer)).GradientNorms(
                request, timeout=self._timeout, metadata=self._channels.metadata
            ),
            f"gradient norms of step {step}",
        )
        by_layer = {n.layer: n.squared_norm for reply in replies for n in reply.layers}
        return [by_layer[layer] for layer in range(self.layout.model.num_units)]

    async def apply_updates(self, step: int, learning_rate: float, scale: float) -> None:
        request = pb.ApplyUpdatesRequest(
            step=step, learning_rate=learning_rate, gradient_scale=scale
        )
        await self._all(
            self.layout.memoryx,
            lambda peer: dataplane_pb2_grpc.UpdateControlStub(self._channel(peer)).ApplyUpdates(
                request, timeout=self._timeout, metadata=self._channels.metadata
            ),
            f"updates of step {step}",
        )

    async def fetch_layers(self, version: int, with_state: bool) -> dict[int, Tensors]:
        """Every layer's weights at `version` (and optimizer state) from its MemoryX."""

        async def fetch(layer: int) -> Tensors:
            owner = self.layout.memoryx_of_layer(layer)
            stub = self._channels.weight_streaming(owner.address)
            request = pb.WeightsRequest(step=version, layer=layer, with_optimizer_state=with_state)
            try:
                streamed = await collect_layer(stub.stream_weights(request, self._timeout))
            except grpc.aio.AioRpcError as err:
                raise _failure(owner, f"fetching layer {layer}", err, self._timeout) from err
            return streamed.tensors

        layers = range(self.layout.model.num_units)
        return dict(zip(layers, await asyncio.gather(*(fetch(i) for i in layers)), strict=True))

    async def eval_set_batches(self) -> int:
        """The batches of one pass over eval_input's data set, as its input workers read it."""
        first = self.layout.workers[0]
        stub = dataplane_pb2_grpc.InputFeedStub(self._channel(first))
        try:
            described = await stub.DescribeEvalSet(
                pb.DescribeEvalSetRequest(),
                timeout=self._timeout,
                metadata=self._channels.metadata,
            )
        except grpc.aio.AioRpcError as err:
            raise _failure(first, "describing the evaluation set", err, self._timeout) from err
        return int(described.batches_per_epoch)

    async def shutdown(self, chief: str, reason: str) -> None:
        """Best effort: ask every other replica to exit 0."""

        async def shutdown(peer: PeerAddress) -> None:
            stub = dataplane_pb2_grpc.ReplicaLifecycleStub(self._channel(peer))
            await stub.Shutdown(
                pb.ShutdownRequest(reason=reason),
                timeout=SHUTDOWN_TIMEOUT,
                metadata=self._channels.metadata,
            )

        peers = self.layout.others(chief)
        results = await asyncio.gather(*(shutdown(p) for p in peers), return_exceptions=True)
        for peer, result in zip(peers, results, strict=True):
            if isinstance(result, grpc.aio.AioRpcError):
                log.warning("could not shut down %s: %s", peer.name, result.code().name)
            elif isinstance(result, BaseException):
                log.warning("could not shut down %s: %r", peer.name, result)

    def _channel(self, peer: PeerAddress) -> grpc.aio.Channel:
        return self._channels.get(peer.address)

    async def _all(
        self,
        peers: tuple[PeerAddress, ...] | list[PeerAddress],
        call: Callable[[PeerAddress], Awaitable[T]],
        what: str,
    ) -> list[T]:
        """Call every peer at once; the first failure cancels the rest and fails the job."""

        async def one(peer: PeerAddress) -> T:
            try:
                return await call(peer)
            except grpc.aio.AioRpcError as err:
                raise _failure(peer, what, err, self._timeout) from err

        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(one(peer)) for peer in peers]
        except ExceptionGroup as failures:
            raise failures.exceptions[0] from None
        return [task.result() for task in tasks]


def _failure(
    peer: PeerAddress, what: str, err: grpc.aio.AioRpcError, timeout: float
) -> ReplicaExit:
    if err.code() is grpc.StatusCode.DEADLINE_EXCEEDED:  # say which limit, and what to change
        return ReplicaExit(
            EXIT_PEER_FAILED,
            f"{what} failed on {peer.name}: no answer within the step timeout ({timeout:g} s, "
            "DEADLINE_EXCEEDED): one step of this model takes longer than that on the "
            "emulated systems; try a smaller model (hidden_size, num_hidden_layers) or "
            "batch_size",
        )
    return ReplicaExit(
        EXIT_PEER_FAILED, f"{what} failed on {peer.name}: {err.code().name}: {err.details()}"
    )
