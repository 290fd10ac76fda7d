"""LayerChunk messages in their protobuf wire format, without protobuf objects in between.

The bytes are exactly what appliance.v1.LayerChunk describes (any protobuf implementation reads
and writes them), but tensor data never goes through a message object: `serialize_chunk` copies
each slice once, straight from the array into the message, and `parse_chunk` hands out the
slices as views of the received message. With the generated classes a layer was copied four
times on its way out (array to bytes, into the message, serialized, and serialized again to
count its size for the traffic meter) and twice on its way in (into the message, out of it),
besides gRPC's own copies. A parsed chunk keeps its received bytes, so a relay sends it on
without serializing it again.
"""

from __future__ import annotations

import dataclasses

from appliance._proto.v1 import dataplane_pb2 as pb

Buffer = bytes | memoryview

# Field tags: (field number << 3) | wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32).
_STEP, _LAYER, _SOURCE, _TENSORS, _LAST = 0x08, 0x10, 0x18, 0x22, 0x28
_NAME, _SHAPE_PACKED, _SHAPE, _DTYPE, _DATA = 0x0A, 0x12, 0x10, 0x18, 0x22
_UINT64 = 1 << 64


@dataclasses.dataclass(frozen=True)
class TensorSlice:
    """Consecutive raw bytes of one tensor of a layer (little-endian float32 unless `dtype`)."""

    name: str
    shape: tuple[int, ...]
    data: Buffer
    dtype: int = pb.DTYPE_FLOAT32


@dataclasses.dataclass(frozen=True)
class WireChunk:
    """One LayerChunk: some consecutive tensor slices of one layer (see tensors.encode_layer).

    `encoded` is the message as received; it is sent on as it is unless a field is replaced
    (`dataclasses.replace(chunk, ..., encoded=None)`).
    """

    step: int
    layer: int
    source_index: int
    tensors: tuple[TensorSlice, ...]
    last: bool = False
    encoded: bytes | None = dataclasses.field(default=None, repr=False, compare=False)


def serialize_chunk(chunk: WireChunk) -> bytes:
    """The chunk's LayerChunk bytes (fields in number order, defaults left out)."""
    if chunk.encoded is not None:
        return chunk.encoded
    return b"".join(chunk_parts(chunk))


def chunk_parts(chunk: WireChunk) -> list[Buffer]:
    """The chunk's LayerChunk bytes as consecutive pieces, tensor data as views (no copy)."""
    if chunk.encoded is not None:
        return [chunk.encoded]
    parts: list[Buffer] = [
        _varint_field(_STEP, chunk.step),
        _varint_field(_LAYER, chunk.layer),
        _varint_field(_SOURCE, chunk.source_index),
    ]
    for piece in chunk.tensors:
        name = piece.name.encode()
        head = b"".join(
            (
                _length_prefixed(_NAME, name) if name else b"",
                _packed(piece.shape),
                _varint_field(_DTYPE, piece.dtype),
            )
        )
        size = len(piece.data)
        data_head = _DATA.to_bytes() + _varint(size) if size else b""
        parts += (_TENSORS.to_bytes(), _varint(len(head) + len(data_head) + size), head)
        if size:
            parts += (data_head, piece.data)
    if chunk.last:
        parts.append(_varint_field(_LAST, 1))
    return parts


def parse_chunk(data: bytes) -> WireChunk:
    """Read LayerChunk bytes; tensor data are views of `data`. Raises ValueError if malformed."""
    step = layer = source_index = 0
    last = False
    tensors: list[TensorSlice] = []
    view = memoryview(data)
    position = 0
    while position < len(data):
        tag, position = _read_varint(data, position)
        if tag == _TENSORS:
            end, position = _span(data, position)
            tensors.append(_parse_slice(data, view, position, end))
            position = end
        elif tag in (_STEP, _LAYER, _SOURCE, _LAST):
            value, position = _read_varint(data, position)
            if tag == _STEP:
                step = _signed(value, 64)
            elif tag == _LAYER:
                layer = _signed(value, 32)
            elif tag == _SOURCE:
                source_index = _signed(value, 32)
            else:
                last = value != 0
        else:
            position = _skip(data, position, tag)
    return WireChunk(step, layer, source_index, tuple(tensors), last, encoded=data)


def _parse_slice(data: bytes, view: memoryview, position: int, end: int) -> TensorSlice:
    name, shape, dtype = "", [], 0
    payload: Buffer = b""
    while position < end:
        tag, position = _read_varint(data, position)
        if tag == _NAME:
            stop, position = _span(data, position, end)
            name, position = bytes(view[position:stop]).decode(), stop
        elif tag == _SHAPE_PACKED:
            stop, position = _span(data, position, end)
            while position < stop:
                dimension, position = _read_varint(data, position)
                shape.append(_signed(dimension, 64))
            if position != stop:
                raise ValueError("a malformed tensor shape")
        elif tag == _SHAPE:
            dimension, position = _read_varint(data, position)
            shape.append(_signed(dimension, 64))
        elif tag == _DTYPE:
            value, position = _read_varint(data, position)
            dtype = _signed(value, 32)
        elif tag == _DATA:
            stop, position = _span(data, position, end)
            payload, position = view[position:stop], stop
        else:
            position = _skip(data, position, tag, end)
    if position != end:
        raise ValueError("a tensor overruns its message")
    return TensorSlice(name, tuple(shape), payload, dtype)


def _varint(value: int) -> bytes:
    value %= _UINT64  # negative numbers as their 64-bit two's complement, as protobuf does
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _varint_field(tag: int, value: int) -> bytes:
    return tag.to_bytes() + _varint(value) if value else b""


def _length_prefixed(tag: int, payload: bytes) -> bytes:
    return tag.to_bytes() + _varint(len(payload)) + payload


def _packed(values: tuple[int, ...]) -> bytes:
    return _length_prefixed(_SHAPE_PACKED, b"".join(map(_varint, values))) if values else b""


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while shift < 70:
        if position >= len(data):
            raise ValueError("a truncated chunk message")
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7
    raise ValueError("a malformed varint in a chunk message")


def _span(data: bytes, position: int, end: int | None = None) -> tuple[int, int]:
    """(end, start) of the length-delimited field whose length is at `position`."""
    length, position = _read_varint(data, position)
    stop = position + length
    if stop > (len(data) if end is None else end):
        raise ValueError("a truncated chunk message")
    return stop, position


def _skip(data: bytes, position: int, tag: int, end: int | None = None) -> int:
    """Past an unknown field (a newer sender may add fields)."""
    wire_type = tag & 7
    if wire_type == 0:
        return _read_varint(data, position)[1]
    if wire_type == 2:
        return _span(data, position, end)[0]
    width = {1: 8, 5: 4}.get(wire_type)
    if width is None or position + width > (len(data) if end is None else end):
        raise ValueError(f"an unreadable field (tag {tag}) in a chunk message")
    return position + width


def _signed(value: int, bits: int) -> int:
    value %= 1 << bits
    return value - (1 << bits) if value >= 1 << (bits - 1) else value
