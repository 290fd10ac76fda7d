"""CS-2: runs one step of its shard of the global batch, one layer at a time.

Forward: each layer's weights stream in from this CS-2's SwarmX just before the layer runs.
Backward: in reverse layer order; each layer's gradient is pushed to the SwarmX as soon as it is
ready while backward carries on. The gradient is that of (sum of this shard's per-sample losses)
/ global batch size, so the shards' gradients add up to the gradient of the global mean loss.
The weights of a step are dropped when the step ends; between steps a CS-2 holds nothing.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from appliance._proto.v1 import dataplane_pb2 as pb
from appliance._proto.v1 import dataplane_pb2_grpc
from appliance.workers import fc_mnist
from appliance.workers.channels import PeerChannels
from appliance.workers.control import ControlPlane
from appliance.workers.fc_mnist import Array
from appliance.workers.lifecycle import StopSignal
from appliance.workers.tensors import collect_layer, encode_layer
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
            loss_sum, num_samples = await self._run_step(layout, stub, request.step)
        except grpc.aio.AioRpcError as err:
            await context.abort(
                err.code(), f"cs2-{self.index} step {request.step}: {swarmx.name}: {err.details()}"
            )
            raise AssertionError("unreachable") from err
        return pb.RunStepResult(loss_sum=loss_sum, num_samples=num_samples)

    async def _run_step(
        self, layout: JobLayout, stub: dataplane_pb2_grpc.WeightStreamingStub, step: int
    ) -> tuple[float, int]:
        config = layout.config
        inputs, labels = fc_mnist.global_batch(config, step)
        inputs, labels = fc_mnist.batch_shard(inputs, labels, self.index, len(layout.cs2))
        last = config.num_layers - 1
        activations = [inputs]
        weights: list[Array] = []
        for layer in range(config.num_layers):
            request = pb.WeightsRequest(step=step, layer=layer)
            streamed = await collect_layer(stub.StreamWeights(request, timeout=self._step_timeout))
            weight, bias = streamed.tensors["weight"], streamed.tensors["bias"]
            weights.append(weight)
            activations.append(fc_mnist.dense_forward(activations[-1], weight, bias, layer < last))
        loss_sum, grad = fc_mnist.softmax_cross_entropy(activations[-1], labels, config.batch_size)
        pushes: list[asyncio.Task[pb.GradientAck]] = []
        try:
            for layer in reversed(range(config.num_layers)):
                grad_weight, grad_bias, grad = fc_mnist.dense_backward(
                    activations[layer], weights[layer], activations[layer + 1], grad, layer < last
                )
                chunks = encode_layer(
                    step, layer, self.index, {"weight": grad_weight, "bias": grad_bias}
                )
                push = stub.PushGradients(chunks, timeout=self._step_timeout)
                pushes.append(asyncio.ensure_future(push))
            await asyncio.gather(*pushes)
        finally:
            for push in pushes:
                push.cancel()
        return loss_sum, len(labels)
