"""The gRPC metrics interceptor on a real grpc.aio server on an ephemeral port: every call
counted once under its method and the status code the caller saw, whatever the method's kind
and however it ended; a method the server lacks makes no series."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from appliance.server.grpc.metrics import CallMetrics
from appliance.services.metrics import Metrics

SERVICE = "test.v1.Probe"


def _service(started: asyncio.Event) -> Any:
    async def ok(request: bytes, context: Any) -> bytes:
        return request

    async def denied(request: bytes, context: Any) -> bytes:
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, "no")
        raise AssertionError("abort returns no more")

    async def broken(request: bytes, context: Any) -> bytes:
        raise RuntimeError("a bug")

    async def forever(request: bytes, context: Any) -> AsyncIterator[bytes]:
        yield b"first"
        started.set()
        await asyncio.Event().wait()  # until the caller goes away

    async def written(request: bytes, context: Any) -> None:  # the context.write style
        await context.write(b"one")
        await context.write(b"two")

    async def echo(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
        async for request in requests:
            yield request

    handlers = {
        "Ok": grpc.unary_unary_rpc_method_handler(ok),
        "Denied": grpc.unary_unary_rpc_method_handler(denied),
        "Broken": grpc.unary_unary_rpc_method_handler(broken),
        "Forever": grpc.unary_stream_rpc_method_handler(forever),
        "Written": grpc.unary_stream_rpc_method_handler(written),
        "Echo": grpc.stream_stream_rpc_method_handler(echo),
    }
    return grpc.method_handlers_generic_handler(SERVICE, handlers)


@pytest.fixture
async def served() -> AsyncIterator[tuple[grpc.aio.Channel, Metrics, asyncio.Event]]:
    metrics, started = Metrics(), asyncio.Event()
    server = grpc.aio.server(interceptors=[CallMetrics(metrics)])
    server.add_generic_rpc_handlers((_service(started),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel, metrics, started
    finally:
        await server.stop(None)


def handled(metrics: Metrics, kind: str, method: str, code: str) -> float:
    labels = {"grpc_type": kind, "grpc_service": SERVICE, "grpc_method": method}
    value = metrics.registry.get_sample_value(
        "grpc_server_handled_total", {**labels, "grpc_code": code}
    )
    return value or 0.0


async def test_each_call_is_counted_under_the_code_its_caller_saw(
    served: tuple[grpc.aio.Channel, Metrics, asyncio.Event],
) -> None:
    channel, metrics, _ = served
    assert await channel.unary_unary(f"/{SERVICE}/Ok")(b"x", timeout=10) == b"x"
    for method, code in (("Denied", "PERMISSION_DENIED"), ("Broken", "UNKNOWN")):
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await channel.unary_unary(f"/{SERVICE}/{method}")(b"", timeout=10)
        assert failed.value.code().name == code
        # An abort sends the status at once; the interceptor counts the call as the abort's
        # exception leaves the handler, which the caller may see after (once, under load 12).
        for _ in range(1000):
            if handled(metrics, "unary", method, code):
                break
            await asyncio.sleep(0.01)
        assert handled(metrics, "unary", method, code) == 1
    assert handled(metrics, "unary", "Ok", "OK") == 1
    assert [m async for m in channel.unary_stream(f"/{SERVICE}/Written")(b"", timeout=10)] == [
        b"one", b"two",
    ]  # fmt: skip
    assert handled(metrics, "server_stream", "Written", "OK") == 1
    echo = channel.stream_stream(f"/{SERVICE}/Echo")
    assert [m async for m in echo(iter([b"a", b"b"]), timeout=10)] == [b"a", b"b"]
    assert handled(metrics, "bidi_stream", "Echo", "OK") == 1
    timed = metrics.registry.get_sample_value(
        "grpc_server_handling_seconds_count",
        {"grpc_type": "unary", "grpc_service": SERVICE, "grpc_method": "Ok"},
    )
    assert timed == 1


async def test_a_stream_the_caller_leaves_is_cancelled_and_unknown_methods_make_no_series(
    served: tuple[grpc.aio.Channel, Metrics, asyncio.Event],
) -> None:
    channel, metrics, started = served
    call = channel.unary_stream(f"/{SERVICE}/Forever")(b"")
    assert await call.read() == b"first"
    await started.wait()
    call.cancel()
    for _ in range(1000):  # the server learns of it on its own loop
        if handled(metrics, "server_stream", "Forever", "CANCELLED"):
            break
        await asyncio.sleep(0.01)
    assert handled(metrics, "server_stream", "Forever", "CANCELLED") == 1
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await channel.unary_unary(f"/{SERVICE}/NoSuchMethod")(b"", timeout=10)
    assert missing.value.code() is grpc.StatusCode.UNIMPLEMENTED
    methods = {
        s.labels["grpc_method"]
        for family in metrics.registry.collect()
        for s in family.samples
        if "grpc_method" in s.labels
    }
    assert "NoSuchMethod" not in methods
