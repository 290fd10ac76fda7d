"""Input batches on the wire: one CS-2's shard of a global batch as BatchChunk messages.

An input worker sends the shard's tensors ("inputs", "targets") as the weights travel
(appliance.workers.transport.tensors: raw little-endian bytes, a tensor's slices consecutive,
at most CHUNK_BYTES of data a message), with the step, where the global batch starts and where
the next one does, and the global batch's sample count; the final chunk is marked `last`. A
stream carries several batches one after the other. The CS-2 checks what arrives: the step it
expects, tensors that fit their shapes, inputs and targets of the same number of rows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from appliance._proto.v1 import dataplane_pb2 as pb
from appliance.workers.models.model import Batch
from appliance.workers.transport.tensors import (
    WIRE_DTYPES,
    assemble_tensors,
    packed_slices,
)
from appliance.workers.transport.wire import TensorSlice

_NAMES = ("inputs", "targets")


@dataclasses.dataclass(frozen=True)
class FedBatch:
    """A CS-2's shard of one global batch, as an input worker sent it."""

    step: int
    batch: Batch
    # Where the global batch starts, and where the next one does.
    position: pb.InputPosition
    next_position: pb.InputPosition
    # Samples in the global batch (the shards of all CS-2s together).
    global_samples: int


def encode_batch(fed: FedBatch) -> Iterator[pb.BatchChunk]:
    """The shard as BatchChunk messages; raises ValueError for a dtype that cannot travel."""
    arrays = [(name, _wire_array(name, array)) for name, array in _tensors(fed.batch)]
    groups = packed_slices(arrays)
    for number, pieces in enumerate(groups, start=1):
        yield pb.BatchChunk(
            step=fed.step,
            position=fed.position,
            next_position=fed.next_position,
            global_samples=fed.global_samples,
            tensors=[
                pb.TensorChunk(
                    name=p.name,
                    shape=p.shape,
                    dtype=pb.DType.ValueType(p.dtype),
                    data=bytes(p.data),
                )
                for p in pieces
            ],
            last=number == len(groups),
        )


def decode_batch(chunks: list[pb.BatchChunk]) -> FedBatch:
    """Reassemble a shard; raises ValueError on a malformed stream."""
    if not chunks:
        raise ValueError("an empty batch stream")
    first = chunks[0]
    if any(c.step != first.step for c in chunks):
        raise ValueError("a batch stream mixes steps")
    pieces = (
        TensorSlice(t.name, tuple(t.shape), t.data, t.dtype) for c in chunks for t in c.tensors
    )
    tensors = assemble_tensors(pieces)
    if sorted(tensors) != sorted(_NAMES):
        raise ValueError(f"batch of step {first.step} holds {sorted(tensors)}, not {_NAMES}")
    inputs, targets = tensors["inputs"], tensors["targets"]
    if inputs.ndim < 1 or targets.ndim < 1 or len(inputs) != len(targets):
        raise ValueError(f"batch of step {first.step}: inputs and targets differ in rows")
    if first.global_samples < len(targets):
        raise ValueError(f"batch of step {first.step}: a shard larger than its global batch")
    return FedBatch(
        step=first.step,
        batch=Batch(inputs, targets),
        position=first.position,
        next_position=first.next_position,
        global_samples=first.global_samples,
    )


async def read_batches(stream: AsyncIterator[pb.BatchChunk]) -> AsyncIterator[FedBatch]:
    """Decode a stream of several batches, each as soon as its last chunk is in."""
    pending: list[pb.BatchChunk] = []
    async for chunk in stream:
        pending.append(chunk)
        if chunk.last:
            yield decode_batch(pending)
            pending = []
    if pending:
        raise ValueError("a batch stream ended in the middle of a batch")


def _tensors(batch: Batch) -> list[tuple[str, npt.NDArray[Any]]]:
    return [("inputs", batch.inputs), ("targets", batch.targets)]


def _wire_array(name: str, array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """`array`, contiguous and little-endian, if its dtype is one that travels."""
    little = array.dtype.newbyteorder("<")
    if little not in WIRE_DTYPES.values():
        raise ValueError(f"batch tensor {name!r} has dtype {array.dtype}, not one that travels")
    return np.ascontiguousarray(array, dtype=little)
