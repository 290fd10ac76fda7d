"""A grpc.aio.Channel to a co-located replica whose calls travel through shared memory.

Generated stubs and WeightStreamingClient take it as they take a gRPC channel: the same
methods, serializers, deadlines and errors (AioRpcError with the server's status code and
details; UNAVAILABLE when the peer is gone; DEADLINE_EXCEEDED past the timeout). Each call
takes a link of its own (local_link.py) from a small pool: a link carries one call at a time,
and goes back to the pool only when its call ended well, so a broken or abandoned call never
leaves a half-read stream behind.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from typing import Any

import grpc

from appliance.workers.transport.local_link import (
    CALL,
    END,
    MESSAGE,
    STATUS,
    Link,
    LinkClosed,
    connect,
    message_parts,
)

_POOL = 4
_CODES = {code.value[0]: code for code in grpc.StatusCode}


class LocalChannel(grpc.aio.Channel):  # type: ignore[misc]
    """Calls to the replica serving at the Unix socket `path`."""

    def __init__(self, path: str, token: str) -> None:
        self.path = path
        self._token = token
        self._idle: list[Link] = []
        self._busy: set[Link] = set()

    def unary_unary(self, method: str, request_serializer: Any = None,
                    response_deserializer: Any = None, **_: Any) -> Any:  # fmt: skip
        return _Callable(self, method, request_serializer, response_deserializer, _unary_unary)

    def unary_stream(self, method: str, request_serializer: Any = None,
                     response_deserializer: Any = None, **_: Any) -> Any:  # fmt: skip
        return _Callable(self, method, request_serializer, response_deserializer, _unary_stream)

    def stream_unary(self, method: str, request_serializer: Any = None,
                     response_deserializer: Any = None, **_: Any) -> Any:  # fmt: skip
        return _Callable(self, method, request_serializer, response_deserializer, _stream_unary)

    def stream_stream(self, method: str, request_serializer: Any = None,
                      response_deserializer: Any = None, **_: Any) -> Any:  # fmt: skip
        raise NotImplementedError("no data-plane method streams both ways")

    async def close(self, grace: float | None = None) -> None:
        for link in [*self._idle, *self._busy]:
            link.close()
        self._idle.clear()
        self._busy.clear()

    async def __aenter__(self) -> LocalChannel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return grpc.ChannelConnectivity.READY

    async def wait_for_state_change(self, last_observed_state: grpc.ChannelConnectivity) -> None:
        raise NotImplementedError("a local channel has no connectivity states to watch")

    async def channel_ready(self) -> None:
        await self.put_back(await self.take(), reusable=True)

    async def take(self) -> Link:
        """An idle link, or a new one; UNAVAILABLE if the peer cannot be reached."""
        while self._idle:
            link = self._idle.pop()
            if not link.closed:
                self._busy.add(link)
                return link
        try:
            link = await connect(self.path, self._token)
        except LinkClosed as err:
            raise _error(grpc.StatusCode.UNAVAILABLE, str(err)) from None
        self._busy.add(link)
        return link

    async def put_back(self, link: Link, reusable: bool) -> None:
        self._busy.discard(link)
        if reusable and not link.closed and len(self._idle) < _POOL:
            self._idle.append(link)
        else:
            link.close()


def _error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


Run = Callable[..., Any]


class _Callable:
    """A stub's method: calling it starts the call."""

    def __init__(
        self,
        channel: LocalChannel,
        method: str,
        serialize: Callable[[Any], bytes] | None,
        deserialize: Callable[[bytes], Any] | None,
        run: Run,
    ) -> None:
        self._channel = channel
        self._method = method
        self._serialize = serialize or (lambda message: message)
        self._deserialize = deserialize or (lambda data: data)
        self._run = run

    def __call__(self, request: Any, *, timeout: float | None = None, **_: Any) -> Any:
        call = _Call(self._channel, self._method, self._serialize, self._deserialize, timeout)
        return self._run(call, request)


class _Call:
    """One call on one link, with its deadline."""

    def __init__(
        self,
        channel: LocalChannel,
        method: str,
        serialize: Callable[[Any], bytes],
        deserialize: Callable[[bytes], Any],
        timeout: float | None,
    ) -> None:
        self.channel = channel
        self.method = method
        self.serialize = serialize
        self.deserialize = deserialize
        loop = asyncio.get_running_loop()
        self.deadline = None if timeout is None else loop.time() + timeout
        self.link: Link | None = None
        self.cancelled = False

    def cancel(self) -> None:
        """End the call now: its link closes, and whoever waits on it gets CancelledError."""
        self.cancelled = True
        if self.link is not None:
            self.link.close("the call was cancelled")

    @contextlib.asynccontextmanager
    async def on_link(self) -> AsyncIterator[Link]:
        """A link for the call, its errors as gRPC's; the link is kept only if all went well."""
        link: Link | None = None
        reusable = False
        try:
            async with asyncio.timeout_at(self.deadline):
                link = self.link = await self.channel.take()
                if self.cancelled:
                    raise asyncio.CancelledError
                link.send_frame(CALL, payload=self.method.encode())
                yield link
                reusable = True
        except TimeoutError:
            raise _error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        except LinkClosed as err:
            if self.cancelled:
                raise asyncio.CancelledError from None
            raise _error(grpc.StatusCode.UNAVAILABLE, f"the peer is gone: {err}") from None
        finally:
            if link is not None:
                await self.channel.put_back(link, reusable)

    async def response(self, link: Link) -> Any:
        """The one response message and the status after it."""
        frame = await link.next_frame()
        response = None
        if frame.kind == MESSAGE:
            response = self.deserialize(link.read_message(frame))
            frame = await link.next_frame()
        _raise_unless_ok(frame.kind, frame.a, frame.payload)
        if response is None:
            raise _error(grpc.StatusCode.INTERNAL, "the call ended without its response")
        return response


def _raise_unless_ok(kind: int, code_value: int, details: bytes) -> None:
    if kind != STATUS:
        raise LinkClosed("an unexpected frame")
    code = _CODES.get(code_value, grpc.StatusCode.UNKNOWN)
    if code is not grpc.StatusCode.OK:
        raise _error(code, details.decode(errors="replace"))


def _unary_unary(call: _Call, request: Any) -> _Awaitable:
    async def run() -> Any:
        async with call.on_link() as link:
            await link.send_message(message_parts(call.serialize, request))
            return await call.response(link)

    return _Awaitable(run())


def _stream_unary(call: _Call, requests: Any) -> _Awaitable:
    async def run() -> Any:
        async with call.on_link() as link:
            sending = asyncio.create_task(_send_all(link, call.serialize, requests))
            answer = asyncio.create_task(call.response(link))
            try:
                await asyncio.wait({sending, answer}, return_when=asyncio.FIRST_COMPLETED)
                if answer.done():  # the server answered (or failed) before the stream ended
                    return answer.result()
                sending.result()  # raises a failure of the request iterator
                return await answer
            finally:
                for task in (sending, answer):
                    task.cancel()
                await asyncio.gather(sending, answer, return_exceptions=True)

    return _Awaitable(run())


async def _send_all(link: Link, serialize: Callable[[Any], bytes], requests: Any) -> None:
    async for request in requests:
        await link.send_message(message_parts(serialize, request))
    link.send_frame(END)


def _unary_stream(call: _Call, request: Any) -> _Stream:
    async def responses() -> AsyncIterator[Any]:
        async with call.on_link() as link:
            await link.send_message(message_parts(call.serialize, request))
            while True:
                frame = await link.next_frame()
                if frame.kind != MESSAGE:
                    _raise_unless_ok(frame.kind, frame.a, frame.payload)
                    return
                yield call.deserialize(link.read_message(frame))

    return _Stream(call, responses())


class _Awaitable:
    """A started unary-response call: await it, or cancel it."""

    def __init__(self, coroutine: Awaitable[Any]) -> None:
        self._task = asyncio.ensure_future(coroutine)

    def __await__(self) -> Generator[Any, None, Any]:
        return self._task.__await__()

    def cancel(self) -> bool:
        return self._task.cancel()

    def done(self) -> bool:
        return self._task.done()


class _Stream:
    """A started response stream: iterate it, or cancel it."""

    def __init__(self, call: _Call, responses: AsyncIterator[Any]) -> None:
        self._call = call
        self._responses = responses

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._responses

    async def read(self) -> Any:
        return await anext(self._responses)

    def cancel(self) -> bool:
        self._call.cancel()
        return True
