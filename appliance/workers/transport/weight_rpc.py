"""The WeightStreaming service (proto/appliance/v1/dataplane.proto) with WireChunk messages.

The same methods, names and bytes on the wire as the generated stub and servicer, but
LayerChunks are (de)serialized by appliance.workers.transport.wire instead of protobuf objects, and
the serializer counts what this process sends (tensors.TRAFFIC): weights for the streamed answers,
gradients for the pushes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Protocol

import grpc

from appliance._proto.v1 import dataplane_pb2 as pb
from appliance.workers.transport.tensors import TRAFFIC
from appliance.workers.transport.wire import (
    Buffer,
    WireChunk,
    chunk_parts,
    parse_chunk,
    serialize_chunk,
)

SERVICE = "appliance.v1.WeightStreaming"


class _Counted:
    """Serializes chunks and counts their bytes as `kind`. `parts` gives the same bytes as
    pieces, for a transport that copies them once into shared memory (local_link.py)."""

    def __init__(self, kind: str) -> None:
        self._kind = kind

    def __call__(self, chunk: WireChunk) -> bytes:
        data = serialize_chunk(chunk)
        TRAFFIC.count(self._kind, len(data))
        return data

    def parts(self, chunk: WireChunk) -> list[Buffer]:
        pieces = chunk_parts(chunk)
        TRAFFIC.count(self._kind, sum(len(piece) for piece in pieces))
        return pieces


def _counted(kind: str) -> Callable[[WireChunk], bytes]:
    return _Counted(kind)


class WeightStreamingClient:
    """Calls to one peer's WeightStreaming service."""

    def __init__(self, channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...]) -> None:
        self._metadata = metadata
        self._stream_weights = channel.unary_stream(
            f"/{SERVICE}/StreamWeights",
            request_serializer=pb.WeightsRequest.SerializeToString,
            response_deserializer=parse_chunk,
        )
        self._stream_step_weights = channel.unary_stream(
            f"/{SERVICE}/StreamStepWeights",
            request_serializer=pb.StepWeightsRequest.SerializeToString,
            response_deserializer=parse_chunk,
        )
        self._push_gradients = channel.stream_unary(
            f"/{SERVICE}/PushGradients",
            request_serializer=_counted("gradients"),
            response_deserializer=pb.GradientAck.FromString,
        )

    def stream_weights(
        self, request: pb.WeightsRequest, deadline: float
    ) -> AsyncIterator[WireChunk]:
        """One layer's weights at a version (optionally with optimizer state)."""
        TRAFFIC.count_call("StreamWeights")
        stream: AsyncIterator[WireChunk] = self._stream_weights(
            request, timeout=deadline, metadata=self._metadata
        )
        return stream

    def stream_step_weights(
        self, request: pb.StepWeightsRequest, deadline: float | None
    ) -> AsyncIterator[WireChunk]:
        """Several layers' weights at a version (or at several consecutive versions), one layer
        after the other. A call for the rest of the job has no deadline (None)."""
        TRAFFIC.count_call("StreamStepWeights")
        stream: AsyncIterator[WireChunk] = self._stream_step_weights(
            request, timeout=deadline, metadata=self._metadata
        )
        return stream

    async def push_gradients(
        self, chunks: AsyncIterator[WireChunk], deadline: float | None
    ) -> pb.GradientAck:
        """Push gradients of one or more steps; answered once MemoryX has taken them all."""
        TRAFFIC.count_call("PushGradients")
        ack: pb.GradientAck = await self._push_gradients(
            chunks, timeout=deadline, metadata=self._metadata
        )
        return ack


class WeightStreamingService(Protocol):
    """What a MemoryX or SwarmX serves."""

    def StreamWeights(
        self, request: pb.WeightsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[WireChunk]: ...

    def StreamStepWeights(
        self, request: pb.StepWeightsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[WireChunk]: ...

    async def PushGradients(
        self, request_iterator: AsyncIterator[WireChunk], context: grpc.aio.ServicerContext
    ) -> pb.GradientAck: ...


def add_weight_streaming(service: WeightStreamingService, server: grpc.aio.Server) -> None:
    """Serve `service` as appliance.v1.WeightStreaming on `server`."""
    handlers = {
        "StreamWeights": grpc.unary_stream_rpc_method_handler(
            service.StreamWeights,
            request_deserializer=pb.WeightsRequest.FromString,
            response_serializer=_counted("weights"),
        ),
        "StreamStepWeights": grpc.unary_stream_rpc_method_handler(
            service.StreamStepWeights,
            request_deserializer=pb.StepWeightsRequest.FromString,
            response_serializer=_counted("weights"),
        ),
        "PushGradients": grpc.stream_unary_rpc_method_handler(
            service.PushGradients,
            request_deserializer=parse_chunk,
            response_serializer=pb.GradientAck.SerializeToString,
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)
