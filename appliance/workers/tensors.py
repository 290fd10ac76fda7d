"""Tensors on the wire: raw little-endian float32 bytes with shape, chunked under ~1 MiB.

A layer (its named tensors, or their gradients) travels as a sequence of LayerChunk messages;
each tensor's chunks are consecutive and it is complete once its bytes match its shape.
`TRAFFIC` counts the serialized bytes this process sends, by kind, for the benchmark.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import AsyncIterable, Iterator, Mapping

import numpy as np

from appliance._proto.v1 import dataplane_pb2 as pb
from appliance.workers.model import Array

CHUNK_BYTES = 1 << 20
_WIRE_DTYPE = np.dtype("<f4")


class TrafficMeter:
    """Serialized bytes of the chunks this process sent, by kind ("weights", "gradients")."""

    def __init__(self) -> None:
        self.sent: dict[str, int] = {}

    def count(self, kind: str, chunk: pb.LayerChunk) -> pb.LayerChunk:
        self.sent[kind] = self.sent.get(kind, 0) + chunk.ByteSize()
        return chunk

    def counted(self, kind: str, chunks: Iterator[pb.LayerChunk]) -> Iterator[pb.LayerChunk]:
        for chunk in chunks:
            yield self.count(kind, chunk)


TRAFFIC = TrafficMeter()


@dataclasses.dataclass(frozen=True)
class LayerTensors:
    """One layer's tensors with the step (or weight version) and sender they came with."""

    step: int
    layer: int
    source_index: int
    tensors: dict[str, Array]


def encode_layer(
    step: int, layer: int, source_index: int, tensors: Mapping[str, Array]
) -> Iterator[pb.LayerChunk]:
    """Chunk every tensor of a layer into LayerChunk messages of at most CHUNK_BYTES of data."""
    for name, array in tensors.items():
        raw = np.ascontiguousarray(array, dtype=_WIRE_DTYPE).tobytes()
        for start in range(0, max(len(raw), 1), CHUNK_BYTES):
            yield pb.LayerChunk(
                step=step,
                layer=layer,
                source_index=source_index,
                tensor=pb.TensorChunk(
                    name=name,
                    shape=list(array.shape),
                    dtype=pb.DTYPE_FLOAT32,
                    data=raw[start : start + CHUNK_BYTES],
                ),
            )


def decode_layer(chunks: list[pb.LayerChunk]) -> LayerTensors:
    """Reassemble the tensors of one layer; raises ValueError on a malformed stream."""
    if not chunks:
        raise ValueError("empty tensor stream")
    first = chunks[0]
    parts: dict[str, list[bytes]] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for chunk in chunks:
        if (chunk.step, chunk.layer, chunk.source_index) != (
            first.step,
            first.layer,
            first.source_index,
        ):
            raise ValueError("a tensor stream mixes steps, layers or senders")
        if chunk.tensor.dtype != pb.DTYPE_FLOAT32:
            raise ValueError(f"tensor {chunk.tensor.name!r} is not float32")
        parts.setdefault(chunk.tensor.name, []).append(chunk.tensor.data)
        shapes[chunk.tensor.name] = tuple(chunk.tensor.shape)
    tensors: dict[str, Array] = {}
    for name, data in parts.items():
        raw = b"".join(data)
        shape = shapes[name]
        if len(raw) != math.prod(shape) * _WIRE_DTYPE.itemsize:
            raise ValueError(f"tensor {name!r}: {len(raw)} bytes do not fit shape {shape}")
        tensors[name] = np.frombuffer(raw, dtype=_WIRE_DTYPE).astype(np.float32).reshape(shape)
    return LayerTensors(first.step, first.layer, first.source_index, tensors)


async def collect_layer(stream: AsyncIterable[pb.LayerChunk]) -> LayerTensors:
    """Read a whole chunk stream and decode it."""
    return decode_layer([chunk async for chunk in stream])
