"""SwarmX's chunk-level building blocks: relaying weights and reducing gradients chunk by chunk.

A big layer travels as several LayerChunk messages (appliance.workers.transport.tensors). SwarmX
hands each chunk on as soon as it has it, instead of after the whole layer: a weight chunk from
MemoryX goes to every CS-2 that asked for the layer, and once every CS-2 behind this SwarmX has
pushed chunk i of a layer's gradient, their sum goes on to MemoryX as chunk i of the partial sum.
The hops of a big layer then overlap instead of following one another.

Chunk i of a layer covers the same tensor slices whoever sends it (every sender chunks the same
shapes the same way), so the chunk-wise sum adds the same numbers in the same order as a sum of
whole layers: the result is bitwise the same.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import numpy as np

from appliance._proto.v1 import dataplane_pb2 as pb
from appliance.workers.transport.wire import TensorSlice, WireChunk

_WIRE_DTYPE = np.dtype("<f4")


class LayerRelay:
    """One layer's weight chunks at one version, kept as they arrive, read by every CS-2."""

    def __init__(self) -> None:
        self._chunks: list[WireChunk] = []
        self._complete = False
        self._error: BaseException | None = None
        self._arrival = asyncio.Event()  # replaced after every change; readers wait on theirs

    def add(self, chunk: WireChunk) -> None:
        """Keep the next chunk; the one marked `last` completes the layer."""
        self._chunks.append(chunk)
        self._complete = chunk.last
        self._changed()

    def fail(self, error: BaseException) -> None:
        """The layer will not complete: readers still waiting get `error`."""
        self._error = error
        self._changed()

    async def chunks(self) -> AsyncIterator[WireChunk]:
        """Every chunk of the layer, in order, each as soon as it has arrived."""
        sent = 0
        while True:
            arrival = self._arrival
            while sent < len(self._chunks):
                yield self._chunks[sent]
                sent += 1
            if self._complete:
                return
            if self._error is not None:
                raise self._error
            await arrival.wait()

    def _changed(self) -> None:
        arrival, self._arrival = self._arrival, asyncio.Event()
        arrival.set()


class ChunkOrder:
    """Where a sender's gradient stream is: the chunk index of each chunk within its layer.

    Raises ValueError when the stream switches step or layer in the middle of a layer.
    """

    def __init__(self) -> None:
        self._layer: tuple[int, int] | None = None  # (step, layer) of an unfinished layer
        self._next = 0

    def index_of(self, chunk: WireChunk) -> int:
        if self._layer is not None and self._layer != (chunk.step, chunk.layer):
            raise ValueError(
                f"layer {chunk.layer} of step {chunk.step} starts before layer "
                f"{self._layer[1]} of step {self._layer[0]} ended"
            )
        index = self._next
        if chunk.last:
            self._layer, self._next = None, 0
        else:
            self._layer, self._next = (chunk.step, chunk.layer), index + 1
        return index

    @property
    def inside_layer(self) -> bool:
        """True if the last chunk seen did not end its layer."""
        return self._layer is not None


def sum_chunks(chunks: list[WireChunk], source_index: int) -> WireChunk:
    """The same chunk of one layer's gradient from several senders, added in list order.

    The sum is sent on as `source_index`. Raises ValueError if the chunks do not cover the same
    tensor slices.
    """
    first = chunks[0]
    layout = [(piece.name, piece.shape, len(piece.data)) for piece in first.tensors]
    for other in chunks[1:]:
        if (other.step, other.layer, other.last) != (first.step, first.layer, first.last) or [
            (piece.name, piece.shape, len(piece.data)) for piece in other.tensors
        ] != layout:
            raise ValueError(f"the senders' chunks of layer {first.layer} do not match")
    if any(piece.dtype != pb.DTYPE_FLOAT32 for piece in first.tensors):
        raise ValueError(f"a gradient of layer {first.layer} is not float32")
    if len(chunks) == 1:  # nothing to add: sent on as received, or relabelled
        if first.source_index == source_index:
            return first  # its received bytes go on without being serialized again
        return dataclasses.replace(first, source_index=source_index, encoded=None)
    pieces = []
    for position, piece in enumerate(first.tensors):
        total = np.frombuffer(piece.data, dtype=_WIRE_DTYPE).copy()
        for other in chunks[1:]:  # left to right in float32: the order fixes the rounding
            total += np.frombuffer(other.tensors[position].data, dtype=_WIRE_DTYPE)
        pieces.append(TensorSlice(piece.name, piece.shape, total.data.cast("B")))
    return dataclasses.replace(
        first, source_index=source_index, tensors=tuple(pieces), encoded=None
    )
