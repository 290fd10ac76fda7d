"""Tensors on the wire: chunking, packing and reassembly, one layer or several per stream."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import numpy as np
import pytest

from appliance.workers.transport import tensors
from appliance.workers.transport.wire import TensorSlice, WireChunk, parse_chunk, serialize_chunk


def test_large_tensor_is_chunked_and_reassembled() -> None:
    weight = np.arange(600 * 700, dtype=np.float32).reshape(600, 700)  # 1.6 MiB
    bias = np.linspace(-1, 1, 700, dtype=np.float32)
    chunks = list(tensors.encode_layer(5, 2, 1, {"weight": weight, "bias": bias}))
    assert len(chunks) == 2  # the bias shares the weight's second slice's message
    assert all(sum(len(t.data) for t in c.tensors) <= tensors.CHUNK_BYTES for c in chunks)
    assert [c.last for c in chunks] == [False, True]
    decoded = tensors.decode_layer(chunks)
    assert (decoded.step, decoded.layer, decoded.source_index) == (5, 2, 1)
    np.testing.assert_array_equal(decoded.tensors["weight"], weight)
    np.testing.assert_array_equal(decoded.tensors["bias"], bias)
    assert bytes(chunks[0].tensors[0].data[:8]) == np.array([0, 1], dtype="<f4").tobytes()


def test_decoded_tensors_are_views_of_the_received_message() -> None:
    weight = np.arange(12, dtype=np.float32).reshape(3, 4)
    received = [
        parse_chunk(serialize_chunk(c)) for c in tensors.encode_layer(1, 0, 0, {"w": weight})
    ]
    decoded = tensors.decode_layer(received).tensors["w"]
    np.testing.assert_array_equal(decoded, weight)
    assert not decoded.flags.writeable and not decoded.flags.owndata


def message_at(encoded: bytes, offset: int) -> bytes:
    """A read-only copy of `encoded` that starts `offset` bytes past a 4-byte boundary (gRPC
    hands out bytes objects wherever its allocator put them)."""
    buffer = bytearray(len(encoded) + 8)
    start = -np.frombuffer(buffer, np.uint8).ctypes.data % 4 + offset
    buffer[start : start + len(encoded)] = encoded
    message: bytes = memoryview(buffer).toreadonly()[start : start + len(encoded)]  # type: ignore[assignment]
    return message


@pytest.mark.parametrize("step", [0, 1, 127, 128, 16_383, 16_384, 2**40])
def test_decoded_tensors_are_aligned_wherever_the_message_put_their_bytes(step: int) -> None:
    """The step's varint shifts every tensor's bytes inside the message; names and shapes shift
    them further. Whatever the offset, a decoded array starts at a multiple of 4 bytes
    (appliance.workers.models.numerics): views where the bytes are aligned, copies where not."""
    rng = np.random.default_rng(step)
    shapes = {"w": (5, 3), "bias": (3,), "attn_qkv_weight": (16, 48), "g": (7,), "wte": (600, 700)}
    layer = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}
    views = 0
    for offset in range(4):  # where the message itself starts, relative to a 4-byte boundary
        received = [
            parse_chunk(message_at(serialize_chunk(chunk), offset))
            for chunk in tensors.encode_layer(step, 3, 1, layer)
        ]
        decoded = tensors.decode_layer(received).tensors
        for name, array in layer.items():
            got = decoded[name]
            assert got.ctypes.data % 4 == 0 and got.flags.aligned, (name, offset)
            assert not got.flags.writeable
            np.testing.assert_array_equal(got, array)
            views += not got.flags.owndata and got.base is not None
    assert views  # aligned bytes are still used in place, not copied


def test_small_tensors_of_a_layer_travel_in_one_message() -> None:
    layer = {"weight": np.ones((16, 8), np.float32), "bias": np.zeros(8, np.float32)}
    chunks = list(tensors.encode_layer(0, 3, 0, layer))
    assert len(chunks) == 1 and chunks[0].last
    assert [t.name for t in chunks[0].tensors] == ["weight", "bias"]


def test_a_stream_of_several_layers_is_split_as_each_completes() -> None:
    big = np.arange(300 * 1000, dtype=np.float32).reshape(300, 1000)  # two chunks
    layers = [{"weight": big, "bias": np.ones(1000, np.float32)}, {"gain": np.ones(4, np.float32)}]

    async def stream() -> AsyncIterator[WireChunk]:
        for index, layer in enumerate(layers):
            for chunk in tensors.encode_layer(7, index, 0, layer):
                yield chunk

    async def read() -> list[tensors.LayerTensors]:
        return [layer async for layer in tensors.read_layers(stream())]

    decoded = asyncio.run(read())
    assert [d.layer for d in decoded] == [0, 1]
    np.testing.assert_array_equal(decoded[0].tensors["weight"], big)
    np.testing.assert_array_equal(decoded[1].tensors["gain"], layers[1]["gain"])


def test_empty_tensor_still_travels() -> None:
    empty = np.zeros((0, 3), dtype=np.float32)
    decoded = tensors.decode_layer(list(tensors.encode_layer(0, 0, 0, {"weight": empty})))
    assert decoded.tensors["weight"].shape == (0, 3)


def test_truncated_stream_is_rejected() -> None:
    (chunk,) = tensors.encode_layer(0, 0, 0, {"weight": np.ones((4, 4), np.float32)})
    piece = chunk.tensors[0]
    short = dataclasses.replace(chunk, tensors=(dataclasses.replace(piece, data=piece.data[:-4]),))
    with pytest.raises(ValueError, match="do not fit shape"):
        tensors.decode_layer([short])


def test_mixed_stream_is_rejected() -> None:
    chunk = WireChunk(step=1, layer=0, source_index=0, tensors=(TensorSlice("w", (0,), b""),))
    other = dataclasses.replace(chunk, step=2)
    with pytest.raises(ValueError, match="mixes"):
        tensors.decode_layer([chunk, other])
