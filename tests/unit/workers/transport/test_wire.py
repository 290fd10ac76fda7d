"""LayerChunk's wire format by hand: the same bytes as the generated protobuf classes."""

from __future__ import annotations

import numpy as np
import pytest

from appliance._proto.v1 import dataplane_pb2 as pb
from appliance.workers.transport import tensors
from appliance.workers.transport.wire import TensorSlice, WireChunk, parse_chunk, serialize_chunk


def _as_message(chunk: WireChunk) -> pb.LayerChunk:
    message = pb.LayerChunk(
        step=chunk.step, layer=chunk.layer, source_index=chunk.source_index, last=chunk.last
    )
    for piece in chunk.tensors:
        message.tensors.add(
            name=piece.name, shape=piece.shape, dtype=piece.dtype, data=bytes(piece.data)
        )
    return message


@pytest.mark.parametrize(
    "chunk",
    [
        WireChunk(0, 0, 0, ()),
        WireChunk(7, 3, 1, (TensorSlice("weight", (2, 3), b"\x01" * 24),), last=True),
        WireChunk(2**40, -1, -5, (TensorSlice("", (), b""), TensorSlice("b", (0, 4), b""))),
        WireChunk(1, 2, 3, (TensorSlice("gain", (300,), bytes(range(200)) * 6, dtype=0),)),
    ],
)
def test_bytes_are_those_of_the_generated_class(chunk: WireChunk) -> None:
    expected = _as_message(chunk)
    assert serialize_chunk(chunk) == expected.SerializeToString(deterministic=True)
    parsed = parse_chunk(expected.SerializeToString())
    assert _as_message(parsed) == expected
    assert parsed.encoded == expected.SerializeToString()


def test_encoded_layers_parse_with_the_generated_class() -> None:
    weight = np.random.default_rng(0).standard_normal((600, 700)).astype(np.float32)
    layer = {"weight": weight, "bias": np.linspace(-1, 1, 700, dtype=np.float32)}
    chunks = list(tensors.encode_layer(5, 2, 1, layer))
    messages = [pb.LayerChunk.FromString(serialize_chunk(c)) for c in chunks]
    assert [m.last for m in messages] == [False, True]
    data = b"".join(t.data for m in messages for t in m.tensors if t.name == "weight")
    np.testing.assert_array_equal(np.frombuffer(data, "<f4").reshape(600, 700), weight)


def test_a_received_chunk_is_sent_on_unchanged() -> None:
    raw = serialize_chunk(WireChunk(4, 1, 0, (TensorSlice("w", (1,), b"abcd"),), last=True))
    assert serialize_chunk(parse_chunk(raw)) is raw


def test_unknown_fields_and_unpacked_shapes_are_read() -> None:
    raw = bytes.fromhex(
        "0804"  # step 4
        "3005"  # field 6, varint: unknown
        "3a03616263"  # field 7, bytes: unknown
        "2214"
        "0a0177"
        "1002"
        "1003"
        "1801"
        "4504000000"
        "2204"
        "00000000"  # tensor, shape 2, 3
        "2801"  # last
    )
    chunk = parse_chunk(raw)
    assert (chunk.step, chunk.last) == (4, True)
    assert chunk.tensors[0].shape == (2, 3) and bytes(chunk.tensors[0].data) == b"\0" * 4


@pytest.mark.parametrize(
    "raw", [b"\x08", b"\x22\x05\x0a", b"\x22\x02\x0a\x05", b"\x0b", b"\x08" + b"\xff" * 11]
)
def test_malformed_messages_are_rejected(raw: bytes) -> None:
    with pytest.raises(ValueError):
        parse_chunk(raw)
