"""The shared-memory transport in one process: the same calls, results and errors as gRPC."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from appliance.workers.transport.local_channel import LocalChannel
from appliance.workers.transport.local_server import LocalServer
from appliance.workers.transport.shm_ring import ReceiveRing, SendRing, slot_bytes

TOKEN = "job-token"
SERVICE = "test.Echo"


async def _echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    if request == b"abort":
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "asked to abort")
    if request == b"crash":
        raise ValueError("boom")
    if request == b"hang":
        await asyncio.Future()
    return request[::-1]


async def _repeat(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
    count, size = (int(n) for n in request.split(b","))
    for number in range(count):
        yield bytes([number % 251]) * size


async def _total(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> bytes:
    total = 0
    async for request in requests:
        if request == b"abort":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a bad part")
        total += sum(request)
    return str(total).encode()


def _handlers() -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Echo": grpc.unary_unary_rpc_method_handler(_echo),
            "Repeat": grpc.unary_stream_rpc_method_handler(_repeat),
            "Total": grpc.stream_unary_rpc_method_handler(_total),
        },
    )


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[LocalServer, LocalChannel]]:
    path = str(tmp_path / "replica.sock")
    server = LocalServer(path, TOKEN)
    server.add_generic_rpc_handlers((_handlers(),))
    await server.start()
    channel = LocalChannel(path, TOKEN)
    try:
        yield server, channel
    finally:
        await channel.close()
        await server.stop(None)


async def test_unary_calls_answer_and_reuse_their_link(
    served: tuple[LocalServer, LocalChannel],
) -> None:
    _, channel = served
    echo = channel.unary_unary(f"/{SERVICE}/Echo")
    assert await echo(b"abc") == b"cba"
    big = os.urandom(3 << 20)
    assert await echo(big) == big[::-1]
    assert len(channel._idle) == 1  # one link served both calls


async def test_streams_carry_more_than_the_ring_holds_in_order(
    served: tuple[LocalServer, LocalChannel],
) -> None:
    _, channel = served
    repeat = channel.unary_stream(f"/{SERVICE}/Repeat")
    received = [message async for message in repeat(b"40,1048576")]
    assert [m[0] for m in received] == [n % 251 for n in range(40)]
    assert all(len(m) == 1 << 20 for m in received)

    async def parts() -> AsyncIterator[bytes]:
        for _ in range(30):
            yield b"\x01" * (1 << 20)

    total = channel.stream_unary(f"/{SERVICE}/Total")
    assert await total(parts()) == str(30 << 20).encode()


@pytest.mark.parametrize(
    ("request_bytes", "code", "details"),
    [
        (b"abort", grpc.StatusCode.FAILED_PRECONDITION, "asked to abort"),
        (b"crash", grpc.StatusCode.UNKNOWN, "boom"),
    ],
)
async def test_a_servicer_error_reaches_the_caller_as_grpc_would_give_it(
    served: tuple[LocalServer, LocalChannel],
    request_bytes: bytes,
    code: grpc.StatusCode,
    details: str,
) -> None:
    _, channel = served
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await channel.unary_unary(f"/{SERVICE}/Echo")(request_bytes)
    assert raised.value.code() is code
    assert details in (raised.value.details() or "")
    assert await channel.unary_unary(f"/{SERVICE}/Echo")(b"ok") == b"ko"  # still serves


async def test_an_unknown_method_is_unimplemented(
    served: tuple[LocalServer, LocalChannel],
) -> None:
    _, channel = served
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await channel.unary_unary(f"/{SERVICE}/Nothing")(b"x")
    assert raised.value.code() is grpc.StatusCode.UNIMPLEMENTED


async def test_a_deadline_ends_a_call_that_hangs(
    served: tuple[LocalServer, LocalChannel],
) -> None:
    _, channel = served
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await channel.unary_unary(f"/{SERVICE}/Echo")(b"hang", timeout=0.2)
    assert raised.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED


async def test_a_stopped_server_makes_calls_unavailable(
    served: tuple[LocalServer, LocalChannel],
) -> None:
    server, channel = served
    repeat = channel.unary_stream(f"/{SERVICE}/Repeat")
    stream = repeat(b"1000000,1024").__aiter__()
    assert len(await anext(stream)) == 1024
    await server.stop(None)
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        async for _ in stream:
            pass
    assert raised.value.code() is grpc.StatusCode.UNAVAILABLE
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await channel.unary_unary(f"/{SERVICE}/Echo")(b"x")
    assert raised.value.code() is grpc.StatusCode.UNAVAILABLE


async def test_a_cancelled_stream_ends_at_once(served: tuple[LocalServer, LocalChannel]) -> None:
    _, channel = served
    call: Any = channel.unary_stream(f"/{SERVICE}/Repeat")(b"1000000,1024")
    stream = call.__aiter__()
    await anext(stream)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        async for _ in stream:
            pass


async def test_the_wrong_credential_is_refused_and_gets_no_ring(
    served: tuple[LocalServer, LocalChannel],
) -> None:
    server, _ = served
    stranger = LocalChannel(server.path, "another-job's-token")
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stranger.unary_unary(f"/{SERVICE}/Echo")(b"x")
    assert raised.value.code() is grpc.StatusCode.UNAVAILABLE
    assert "credential" in (raised.value.details() or "")


def test_the_socket_is_the_owners_alone(tmp_path: Path) -> None:
    async def mode() -> int:
        server = LocalServer(str(tmp_path / "s.sock"), TOKEN)
        await server.start()
        try:
            return os.stat(server.path).st_mode & 0o777
        finally:
            await server.stop(None)

    assert asyncio.run(mode()) == 0o600
    assert not (tmp_path / "s.sock").exists()  # unlinked when the server stops


async def test_a_full_ring_waits_for_its_reader_and_never_overwrites_a_held_slot() -> None:
    """Messages of every size through a small ring whose reader lags: every write that finds
    no room waits (the ring full with its head on its tail included), and every message is
    read back as written."""
    size = 64 + 8 * slot_bytes(100)
    sender = SendRing(size)
    receiver = ReceiveRing(os.dup(sender.fd), size)
    released = [0]  # what the reader has released, as the writer reads it
    announced: list[tuple[int, int, int, bytes]] = []
    rng = random.Random(5)
    try:
        for number in range(400):
            message = bytes([number % 256]) * rng.choice([1, 40, 100, 250, 300])
            writing = asyncio.ensure_future(sender.write([message], lambda: released[0]))
            while not writing.done():  # no room: the reader takes the oldest message
                await asyncio.sleep(0)  # let the write look for room once more
                if not writing.done() and announced:
                    seq, offset, length, expected = announced.pop(0)
                    assert receiver.read(seq, offset, length) == expected
                    released[0] = seq
                    sender.wake()
            announced.append((*writing.result(), message))
            if rng.random() < 0.3 and announced:  # sometimes the reader keeps up
                seq, offset, length, expected = announced.pop(0)
                assert receiver.read(seq, offset, length) == expected
                released[0] = seq
    finally:
        sender.close()
        receiver.close()
