"""Tensors on the wire: raw little-endian float32 bytes with shape, chunked under ~1 MiB.

A layer (its named tensors, or their gradients) travels as a sequence of LayerChunk messages
(appliance.workers.transport.wire), each packing as many consecutive tensor slices as fit in
CHUNK_BYTES (one message per message round trip is what costs, not bytes); each tensor's slices are
consecutive and it is complete once its bytes match its shape. A stream may carry several layers
one after the other; the final chunk of each is marked `last`. Encoded chunks are views of the
arrays (they are copied once, into the message, when gRPC sends them, so the arrays must not change
until then); decoded arrays are read-only views of the received bytes (no copy) where those start
at a multiple of 4 bytes, and read-only copies where they do not
(appliance.workers.models.numerics: a misaligned operand changes the rounding): every consumer
reads them or builds new arrays from them. `TRAFFIC` counts the serialized bytes this process
sends, by kind, for the benchmark, and the calls it makes.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from appliance._proto.v1 import dataplane_pb2 as pb
from appliance.workers.models.model import Array
from appliance.workers.transport.wire import Buffer, TensorSlice, WireChunk

CHUNK_BYTES = 1 << 20
_WIRE_DTYPE = np.dtype("<f4")
# The dtypes a tensor may travel as (weights and gradients: float32 only), by DType code.
WIRE_DTYPES: dict[int, np.dtype[Any]] = {
    pb.DTYPE_FLOAT32: _WIRE_DTYPE,
    pb.DTYPE_INT64: np.dtype("<i8"),
    pb.DTYPE_INT32: np.dtype("<i4"),
}
_WIRE_CODES = {dtype: code for code, dtype in WIRE_DTYPES.items()}


class TrafficMeter:
    """Serialized bytes of the chunks this process sent, by kind ("weights", "gradients"), and
    the WeightStreaming calls it made, by method."""

    def __init__(self) -> None:
        self.sent: dict[str, int] = {}
        self.calls: dict[str, int] = {}

    def count(self, kind: str, size: int) -> None:
        self.sent[kind] = self.sent.get(kind, 0) + size

    def count_call(self, method: str) -> None:
        self.calls[method] = self.calls.get(method, 0) + 1

    def report(self, log: logging.Logger) -> None:
        """Log the totals (bench.weight_streaming and the worker tests read these lines)."""
        log.info("tensor traffic sent: %s", json.dumps(self.sent))
        log.info("weight-streaming calls made: %s", json.dumps(self.calls))


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
) -> Iterator[WireChunk]:
    """Pack a layer's tensors, in order, into chunks of at most CHUNK_BYTES of data (a larger
    tensor is sliced); the final chunk is marked `last`."""
    arrays = ((name, np.ascontiguousarray(a, dtype=_WIRE_DTYPE)) for name, a in tensors.items())
    groups = packed_slices(arrays)
    for number, pieces in enumerate(groups, start=1):
        yield WireChunk(step, layer, source_index, pieces, last=number == len(groups))


def packed_slices(
    arrays: Iterable[tuple[str, npt.NDArray[Any]]],
) -> list[tuple[TensorSlice, ...]]:
    """The arrays' raw bytes (views, no copy) as consecutive slices, in order, packed into
    groups of at most CHUNK_BYTES (a larger array is sliced); at least one group. Each array
    must be contiguous, little-endian and of a WIRE_DTYPES type."""
    groups: list[tuple[TensorSlice, ...]] = []
    pieces: list[TensorSlice] = []
    size = 0
    for name, contiguous in arrays:
        dtype = _WIRE_CODES[contiguous.dtype]
        raw = contiguous.data.cast("B") if contiguous.size else memoryview(b"")
        shape = tuple(int(n) for n in contiguous.shape)
        for start in range(0, max(len(raw), 1), CHUNK_BYTES):
            data = raw[start : start + CHUNK_BYTES]
            if pieces and size + len(data) > CHUNK_BYTES:
                groups.append(tuple(pieces))
                pieces, size = [], 0
            pieces.append(TensorSlice(name, shape, data, dtype))
            size += len(data)
    groups.append(tuple(pieces))
    return groups


def decode_layer(chunks: list[WireChunk]) -> LayerTensors:
    """Reassemble the tensors of one layer; raises ValueError on a malformed stream."""
    if not chunks:
        raise ValueError("empty tensor stream")
    first = chunks[0]
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
    pieces = (piece for chunk in chunks for piece in chunk.tensors)
    tensors: dict[str, Array] = assemble_tensors(pieces)
    return LayerTensors(first.step, first.layer, first.source_index, tensors)


def assemble_tensors(pieces: Iterable[TensorSlice]) -> dict[str, npt.NDArray[Any]]:
    """The tensors whose consecutive slices `pieces` are (read-only arrays, views where
    aligned); raises ValueError for an unknown dtype or bytes that do not fit a shape."""
    parts: dict[str, list[Buffer]] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    dtypes: dict[str, np.dtype[Any]] = {}
    for piece in pieces:
        dtype = WIRE_DTYPES.get(piece.dtype)
        if dtype is None:
            raise ValueError(f"tensor {piece.name!r} has an unknown dtype {piece.dtype}")
        parts.setdefault(piece.name, []).append(piece.data)
        shapes[piece.name], dtypes[piece.name] = piece.shape, dtype
    tensors: dict[str, npt.NDArray[Any]] = {}
    for name, data in parts.items():
        raw = data[0] if len(data) == 1 else b"".join(data)
        shape, dtype = shapes[name], dtypes[name]
        if any(n < 0 for n in shape) or len(raw) != math.prod(shape) * dtype.itemsize:
            raise ValueError(f"tensor {name!r}: {len(raw)} bytes do not fit shape {shape}")
        array = np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("="), copy=False)
        tensors[name] = _aligned(array).reshape(shape)
    return tensors


def _aligned(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """`array` if its data start at a multiple of its item size, else a read-only copy."""
    if array.flags.aligned:
        return array
    copy = array.copy()  # NumPy allocates at the allocator's alignment (16 bytes on glibc)
    copy.flags.writeable = False
    return copy


async def collect_layer(stream: AsyncIterable[WireChunk]) -> LayerTensors:
    """Read a whole chunk stream and decode it."""
    return decode_layer([chunk async for chunk in stream])


async def layer_chunks(stream: AsyncIterable[WireChunk]) -> AsyncIterator[list[WireChunk]]:
    """Split a stream of several layers into each layer's chunks, as each layer completes."""
    pending: list[WireChunk] = []
    async for chunk in stream:
        pending.append(chunk)
        if chunk.last:
            yield pending
            pending = []
    if pending:  # a single-layer sender need not mark its final chunk
        yield pending


async def read_layers(stream: AsyncIterable[WireChunk]) -> AsyncIterator[LayerTensors]:
    """Decode a stream of several layers, one layer as soon as it is complete."""
    async for chunks in layer_chunks(stream):
        yield decode_layer(chunks)
