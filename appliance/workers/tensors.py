"""Tensors on the wire: raw little-endian float32 bytes with shape, chunked under ~1 MiB.

A layer (its named tensors, or their gradients) travels as a sequence of LayerChunk messages,
each packing as many consecutive tensor slices as fit in CHUNK_BYTES (one message per message
round trip is what costs, not bytes); each tensor's slices are consecutive and it is complete
once its bytes match its shape. A stream
may carry several layers one after the other; the final chunk of each is marked `last`.
Decoded arrays are read-only views of the received bytes (no copy): every consumer reads them or
builds new arrays from them.
`TRAFFIC` counts the serialized bytes this process sends, by kind, for the benchmark.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import AsyncIterable, AsyncIterator, Iterator, Mapping

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
    """Pack a layer's tensors, in order, into LayerChunk messages of at most CHUNK_BYTES of data
    (a larger tensor is sliced); the final chunk is marked `last`."""
    chunk = pb.LayerChunk(step=step, layer=layer, source_index=source_index)
    size = 0
    for name, array in tensors.items():
        raw = np.ascontiguousarray(array, dtype=_WIRE_DTYPE).tobytes()
        for start in range(0, max(len(raw), 1), CHUNK_BYTES):
            # Slicing the whole of a bytes object returns it: a one-slice tensor is not copied.
            data = raw if len(raw) <= CHUNK_BYTES else raw[start : start + CHUNK_BYTES]
            if chunk.tensors and size + len(data) > CHUNK_BYTES:
                yield chunk
                chunk = pb.LayerChunk(step=step, layer=layer, source_index=source_index)
                size = 0
            chunk.tensors.add(name=name, shape=array.shape, dtype=pb.DTYPE_FLOAT32, data=data)
            size += len(data)
    chunk.last = True
    yield chunk


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
        for piece in chunk.tensors:
            if piece.dtype != pb.DTYPE_FLOAT32:
                raise ValueError(f"tensor {piece.name!r} is not float32")
            parts.setdefault(piece.name, []).append(piece.data)
            shapes[piece.name] = tuple(piece.shape)
    tensors: dict[str, Array] = {}
    for name, data in parts.items():
        raw = data[0] if len(data) == 1 else b"".join(data)
        shape = shapes[name]
        if len(raw) != math.prod(shape) * _WIRE_DTYPE.itemsize:
            raise ValueError(f"tensor {name!r}: {len(raw)} bytes do not fit shape {shape}")
        array = np.frombuffer(raw, dtype=_WIRE_DTYPE).astype(np.float32, copy=False)
        tensors[name] = array.reshape(shape)
    return LayerTensors(first.step, first.layer, first.source_index, tensors)


async def collect_layer(stream: AsyncIterable[pb.LayerChunk]) -> LayerTensors:
    """Read a whole chunk stream and decode it."""
    return decode_layer([chunk async for chunk in stream])


async def layer_chunks(stream: AsyncIterable[pb.LayerChunk]) -> AsyncIterator[list[pb.LayerChunk]]:
    """Split a stream of several layers into each layer's chunks, as each layer completes."""
    pending: list[pb.LayerChunk] = []
    async for chunk in stream:
        pending.append(chunk)
        if chunk.last:
            yield pending
            pending = []
    if pending:  # a single-layer sender need not mark its final chunk
        yield pending


async def read_layers(stream: AsyncIterable[pb.LayerChunk]) -> AsyncIterator[LayerTensors]:
    """Decode a stream of several layers, one layer as soon as it is complete."""
    async for chunks in layer_chunks(stream):
        yield decode_layer(chunks)
