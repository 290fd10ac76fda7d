"""Input batches on the wire: exact round trips, chunked, and malformed streams refused."""

from __future__ import annotations

import numpy as np
import pytest

from appliance._proto.v1 import dataplane_pb2 as pb
from appliance.workers.models.model import Batch
from appliance.workers.transport.batches import FedBatch, decode_batch, encode_batch
from appliance.workers.transport.tensors import CHUNK_BYTES


def _fed(inputs: np.ndarray, targets: np.ndarray) -> FedBatch:
    return FedBatch(
        step=7,
        batch=Batch(inputs, targets),
        position=pb.InputPosition(epoch=1, offset=64, seed=3),
        next_position=pb.InputPosition(epoch=1, offset=128, seed=3),
        global_samples=2 * len(targets),
    )


@pytest.mark.parametrize(
    "inputs",
    [
        np.random.default_rng(0).standard_normal((5, 64)).astype(np.float32),
        np.arange(40, dtype=np.int64).reshape(5, 8),  # token ids
        np.random.default_rng(1).standard_normal((600, 1024)).astype(np.float32),  # 2.3 MiB
    ],
)
def test_a_shard_travels_bit_for_bit(inputs: np.ndarray) -> None:
    targets = np.arange(len(inputs), dtype=np.int64)
    chunks = list(encode_batch(_fed(inputs, targets)))
    assert all(sum(len(t.data) for t in c.tensors) <= CHUNK_BYTES for c in chunks)
    assert [c.last for c in chunks] == [False] * (len(chunks) - 1) + [True]
    got = decode_batch(chunks)
    assert got.batch.inputs.dtype == inputs.dtype
    np.testing.assert_array_equal(got.batch.inputs, inputs)
    np.testing.assert_array_equal(got.batch.targets, targets)
    assert (got.step, got.global_samples, got.next_position.offset) == (7, 2 * len(inputs), 128)


def test_a_dtype_that_does_not_travel_is_refused() -> None:
    with pytest.raises(ValueError, match="dtype float64"):
        list(encode_batch(_fed(np.zeros((2, 3)), np.zeros(2, np.int64))))


def test_inputs_and_targets_of_different_rows_are_refused() -> None:
    chunks = list(encode_batch(_fed(np.zeros((3, 2), np.float32), np.zeros(2, np.int64))))
    with pytest.raises(ValueError, match="differ in rows"):
        decode_batch(chunks)
