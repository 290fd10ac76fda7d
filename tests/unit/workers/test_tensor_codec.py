"""Tensors on the wire: chunking and reassembly."""

from __future__ import annotations

import numpy as np
import pytest

from appliance._proto.v1 import dataplane_pb2 as pb
from appliance.workers import tensors


def test_large_tensor_is_chunked_and_reassembled() -> None:
    weight = np.arange(600 * 700, dtype=np.float32).reshape(600, 700)  # 1.6 MiB
    bias = np.linspace(-1, 1, 700, dtype=np.float32)
    chunks = list(tensors.encode_layer(5, 2, 1, {"weight": weight, "bias": bias}))
    assert len(chunks) == 3
    assert all(len(c.tensor.data) <= tensors.CHUNK_BYTES for c in chunks)
    decoded = tensors.decode_layer(chunks)
    assert (decoded.step, decoded.layer, decoded.source_index) == (5, 2, 1)
    np.testing.assert_array_equal(decoded.tensors["weight"], weight)
    np.testing.assert_array_equal(decoded.tensors["bias"], bias)
    assert chunks[0].tensor.data[:8] == np.array([0, 1], dtype="<f4").tobytes()


def test_empty_tensor_still_travels() -> None:
    empty = np.zeros((0, 3), dtype=np.float32)
    decoded = tensors.decode_layer(list(tensors.encode_layer(0, 0, 0, {"weight": empty})))
    assert decoded.tensors["weight"].shape == (0, 3)


def test_truncated_stream_is_rejected() -> None:
    chunks = list(tensors.encode_layer(0, 0, 0, {"weight": np.ones((4, 4), np.float32)}))
    chunks[0].tensor.data = chunks[0].tensor.data[:-4]
    with pytest.raises(ValueError, match="do not fit shape"):
        tensors.decode_layer(chunks)


def test_mixed_stream_is_rejected() -> None:
    chunk = pb.LayerChunk(step=1, layer=0, tensor=pb.TensorChunk(dtype=pb.DTYPE_FLOAT32))
    other = pb.LayerChunk(step=2, layer=0, tensor=pb.TensorChunk(dtype=pb.DTYPE_FLOAT32))
    with pytest.raises(ValueError, match="mixes"):
        tensors.decode_layer([chunk, other])
