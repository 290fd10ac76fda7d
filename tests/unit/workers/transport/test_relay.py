"""SwarmX's chunk-wise relay and reduce: chunks go on as they arrive; sums match whole layers."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from appliance.workers.roles.memoryx import sum_in_order
from appliance.workers.transport import tensors
from appliance.workers.transport.relay import ChunkOrder, LayerRelay, sum_chunks
from appliance.workers.transport.wire import TensorSlice, WireChunk, parse_chunk, serialize_chunk


def _gradient(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "weight": rng.standard_normal((700, 500)).astype(np.float32),  # two chunks
        "bias": rng.standard_normal(500).astype(np.float32),
    }


def test_chunkwise_sum_is_bitwise_the_sum_of_whole_layers() -> None:
    grads = [_gradient(seed) for seed in range(3)]
    sent = [
        [parse_chunk(serialize_chunk(c)) for c in tensors.encode_layer(4, 1, i, g)]
        for i, g in enumerate(grads)
    ]
    assert len(sent[0]) == 2
    summed = [sum_chunks([chunks[i] for chunks in sent], 9) for i in range(2)]
    decoded = tensors.decode_layer([parse_chunk(serialize_chunk(c)) for c in summed])
    assert (decoded.step, decoded.layer, decoded.source_index) == (4, 1, 9)
    for name in ("weight", "bias"):
        expected = sum_in_order([g[name] for g in grads])
        assert decoded.tensors[name].tobytes() == expected.tobytes()


def test_one_sender_is_relabelled_without_changing_its_data() -> None:
    (chunk,) = tensors.encode_layer(0, 2, 3, {"w": np.ones(4, np.float32)})
    relabelled = sum_chunks([chunk], 1)
    assert relabelled.source_index == 1 and relabelled.tensors == chunk.tensors
    assert parse_chunk(serialize_chunk(relabelled)).source_index == 1


def test_one_sender_with_the_same_index_goes_on_as_received() -> None:
    (chunk,) = tensors.encode_layer(0, 2, 0, {"w": np.ones(4, np.float32)})
    received = parse_chunk(serialize_chunk(chunk))
    assert sum_chunks([received], 0) is received  # its bytes are sent on, not serialized again


def test_chunks_that_do_not_match_are_rejected() -> None:
    (a,) = tensors.encode_layer(0, 2, 0, {"w": np.ones(4, np.float32)})
    (b,) = tensors.encode_layer(0, 2, 1, {"w": np.ones(5, np.float32)})
    with pytest.raises(ValueError, match="do not match"):
        sum_chunks([a, b], 0)


def test_chunk_order_indexes_chunks_within_each_layer() -> None:
    order = ChunkOrder()
    chunk = WireChunk(1, 5, 0, ())
    assert [order.index_of(chunk), order.index_of(chunk)] == [0, 1]
    assert order.inside_layer
    with pytest.raises(ValueError, match="starts before"):
        order.index_of(WireChunk(1, 4, 0, ()))
    assert order.index_of(WireChunk(1, 5, 0, (), last=True)) == 2
    assert not order.inside_layer and order.index_of(WireChunk(1, 4, 0, ())) == 0


def test_relay_hands_each_chunk_to_every_reader_as_it_arrives() -> None:
    async def scenario() -> None:
        relay = LayerRelay()
        first = WireChunk(3, 0, 0, (TensorSlice("w", (2,), b"\0" * 4),))
        last = WireChunk(3, 0, 0, (TensorSlice("w", (2,), b"\0" * 4),), last=True)
        got: list[list[WireChunk]] = [[], []]
        arrived = asyncio.Event()

        async def read(into: list[WireChunk]) -> None:
            async for chunk in relay.chunks():
                into.append(chunk)
                arrived.set()

        readers = [asyncio.create_task(read(into)) for into in got]
        relay.add(first)
        await arrived.wait()
        await asyncio.sleep(0)
        assert got == [[first], [first]]  # before the layer is complete
        relay.add(last)
        await asyncio.gather(*readers)
        assert got == [[first, last], [first, last]]
        late: list[WireChunk] = []
        await read(late)
        assert late == [first, last]

    asyncio.run(scenario())


def test_relay_readers_get_the_fetch_error_after_the_chunks_that_came() -> None:
    relay = LayerRelay()
    first = WireChunk(3, 0, 0, ())
    relay.add(first)
    relay.fail(ValueError("memoryx-0 ended the stream after 0 layers"))
    seen: list[WireChunk] = []

    async def read() -> None:
        async for chunk in relay.chunks():
            seen.append(chunk)

    with pytest.raises(ValueError, match="ended the stream"):
        asyncio.run(read())
    assert seen == [first]
