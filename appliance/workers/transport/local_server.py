"""The data-plane services of a replica, served to co-located replicas of its job through shared
memory (local_link.py) beside the gRPC server that serves everyone else.

The same servicer objects and method handlers serve both: the runtime registers the role's
services on a `ServerPair`, which hands them to the gRPC server and to a `LocalServer`. A call
over a link runs the handler gRPC would run, with a context whose `abort` ends the call with
the same status code and details a gRPC client would see (local_channel.py turns them back
into AioRpcError), so the roles cannot tell the transports apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, NoReturn

import grpc

from appliance.workers.transport.local_link import (
    CALL,
    END,
    MESSAGE,
    STATUS,
    Frame,
    Link,
    LinkClosed,
    accept,
    message_parts,
)

log = logging.getLogger(__name__)
_MAX_CONNECTIONS = 256


class LocalServer(grpc.aio.Server):  # type: ignore[misc]
    """Serves registered gRPC method handlers over links to a Unix socket at `path`."""

    def __init__(self, path: str, token: str) -> None:
        self.path = path
        self._token = token
        self._generic: list[grpc.GenericRpcHandler] = []
        self._socket: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._links: set[asyncio.Task[None]] = set()

    def add_generic_rpc_handlers(
        self, generic_rpc_handlers: Sequence[grpc.GenericRpcHandler]
    ) -> None:
        self._generic.extend(generic_rpc_handlers)

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        """The generic handlers added with them already cover these methods."""

    def add_insecure_port(self, address: str) -> int:
        raise NotImplementedError("a local server listens on its Unix socket only")

    def add_secure_port(self, address: str, server_credentials: grpc.ServerCredentials) -> int:
        raise NotImplementedError("a local server listens on its Unix socket only")

    async def start(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        if self.path.startswith("\0"):  # abstract: no file; the peer's uid and token decide
            sock.bind(self.path)
        else:
            old_umask = os.umask(0o177)  # the socket file: the owner only, from the start
            try:
                sock.bind(self.path)
            finally:
                os.umask(old_umask)
        sock.listen(64)
        sock.setblocking(False)
        self._socket = sock
        self._accepting = asyncio.create_task(self._accept_forever(sock))

    async def stop(self, grace: float | None) -> None:
        if self._accepting is not None:
            self._accepting.cancel()
            await asyncio.gather(self._accepting, return_exceptions=True)
        for task in list(self._links):
            task.cancel()
        await asyncio.gather(*self._links, return_exceptions=True)
        if self._socket is not None:
            self._socket.close()
            if not self.path.startswith("\0"):
                with contextlib.suppress(OSError):
                    os.unlink(self.path)
            self._socket = None

    async def wait_for_termination(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        raise NotImplementedError("the runtime stops the local server with the gRPC one")

    async def _accept_forever(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            connection, _ = await loop.sock_accept(sock)
            if len(self._links) >= _MAX_CONNECTIONS:
                connection.close()
                continue
            connection.setblocking(False)
            task = asyncio.create_task(self._serve(connection))
            self._links.add(task)
            task.add_done_callback(self._links.discard)

    async def _serve(self, connection: socket.socket) -> None:
        link = await accept(connection, self._token)
        if link is None:
            log.warning("refused a local data-plane connection without the job's credential")
            return
        try:
            while await self._serve_call(link):
                pass
        except LinkClosed:
            pass
        finally:
            link.close()

    async def _serve_call(self, link: Link) -> bool:
        """Serve the next call on `link`; False once the link should close."""
        frame = await link.next_frame()
        if frame.kind != CALL:
            return False
        method = frame.payload.decode(errors="replace")
        handler = self._handler(method)
        if handler is None:
            _status(link, grpc.StatusCode.UNIMPLEMENTED, f"Method not found: {method}")
            return False
        if handler.request_streaming:
            request: Any = _requests(link, handler.request_deserializer or _as_is)
            gone = None  # the request stream itself says when the client went away
        else:
            try:
                request = await _one_request(link, handler.request_deserializer or _as_is)
            except _Aborted as aborted:
                _status(link, aborted.code, aborted.details)
                return False
            gone = asyncio.create_task(link.next_frame())  # nothing may follow but the end
        call = asyncio.create_task(_run(handler, request, link, _LocalContext(method)))
        try:
            waiting = {call} if gone is None else {call, gone}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not call.done():  # the client went away (or sent what it must not): stop
                call.cancel()
            if gone is not None:
                gone.cancel()
            await asyncio.gather(call, return_exceptions=True)
            if gone is not None:
                await asyncio.gather(gone, return_exceptions=True)
        if gone is not None and gone.done() and not gone.cancelled():
            return False
        return not call.cancelled() and call.exception() is None and call.result()

    def _handler(self, method: str) -> grpc.RpcMethodHandler | None:
        details = _CallDetails(method)
        for generic in self._generic:
            handler = generic.service(details)
            if handler is not None:
                return handler
        return None


async def _run(
    handler: grpc.RpcMethodHandler, request: Any, link: Link, context: _LocalContext
) -> bool:
    """Run one call's handler over `link`; True if it ended well (the link may serve more)."""
    try:
        serialize: Callable[[Any], bytes] = handler.response_serializer or _as_is
        if handler.response_streaming:
            method = handler.unary_stream or handler.stream_stream
            async for response in method(request, context):
                await link.send_message(message_parts(serialize, response))
        else:
            method = handler.unary_unary or handler.stream_unary
            response = await method(request, context)
            await link.send_message(message_parts(serialize, response))
    except _Aborted as aborted:
        _status(link, aborted.code, aborted.details)
        return False
    except LinkClosed:
        return False
    except Exception as err:  # as gRPC answers a servicer's unexpected error
        log.exception("local data-plane call %s failed", context.method)
        _status(link, grpc.StatusCode.UNKNOWN, f"Unexpected {type(err)}: {err}")
        return False
    _status(link, grpc.StatusCode.OK, "")
    return True


async def _one_request(link: Link, deserialize: Callable[[bytes], Any]) -> Any:
    frame = await link.next_frame()
    if frame.kind != MESSAGE:
        raise LinkClosed("a call without its request")
    return _parsed(link, frame, deserialize)


async def _requests(link: Link, deserialize: Callable[[bytes], Any]) -> AsyncIterator[Any]:
    while True:
        frame = await link.next_frame()
        if frame.kind == END:
            return
        if frame.kind != MESSAGE:
            raise LinkClosed("a request stream broken off")
        yield _parsed(link, frame, deserialize)


def _parsed(link: Link, frame: Frame, deserialize: Callable[[bytes], Any]) -> Any:
    data = link.read_message(frame)
    try:
        return deserialize(data)
    except Exception as err:  # a message gRPC could not have parsed either
        raise _Aborted(grpc.StatusCode.INTERNAL, f"a malformed request message: {err}") from err


def _as_is(message: Any) -> Any:
    return message


def _status(link: Link, code: grpc.StatusCode, details: str) -> None:
    with contextlib.suppress(LinkClosed):
        link.send_frame(STATUS, code.value[0], payload=details.encode()[:4000])


class _Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class _CallDetails(grpc.HandlerCallDetails):  # type: ignore[misc]
    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = ()


class _LocalContext(grpc.aio.ServicerContext):  # type: ignore[misc]
    """What a servicer may ask of its call over a link: to end it with a status."""

    def __init__(self, method: str) -> None:
        self.method = method

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()
    ) -> NoReturn:
        raise _Aborted(code, details)

    async def abort_with_status(self, status: Any) -> NoReturn:
        raise _Aborted(status.code, status.details)

    def invocation_metadata(self) -> tuple[()]:
        return ()  # the link was authenticated once, when it was made

    def peer(self) -> str:
        return "local"

    def peer_identities(self) -> None:
        return None

    def peer_identity_key(self) -> None:
        return None

    def auth_context(self) -> dict[str, Any]:
        return {}

    def time_remaining(self) -> None:
        return None  # the client keeps the deadline

    def cancelled(self) -> bool:
        return False

    def done(self) -> bool:
        return False

    def set_code(self, code: grpc.StatusCode) -> None:
        raise NotImplementedError("servicers end calls with abort(), not set_code()")

    def set_details(self, details: str) -> None:
        raise NotImplementedError("servicers end calls with abort(), not set_details()")

    def set_compression(self, compression: grpc.Compression) -> None:
        """Nothing is compressed in shared memory."""

    def disable_next_message_compression(self) -> None:
        """Nothing is compressed in shared memory."""

    async def send_initial_metadata(self, initial_metadata: Any) -> None:
        raise NotImplementedError("the local transport carries no metadata")

    def set_trailing_metadata(self, trailing_metadata: Any) -> None:
        raise NotImplementedError("the local transport carries no metadata")

    async def read(self) -> Any:
        raise NotImplementedError("servicers read their request iterator")

    async def write(self, message: Any) -> None:
        raise NotImplementedError("servicers yield their responses")


class ServerPair(grpc.aio.Server):  # type: ignore[misc]
    """Registers each service on both servers; the runtime starts and stops each itself."""

    def __init__(self, remote: grpc.aio.Server, local: LocalServer | None) -> None:
        self._servers = [remote] if local is None else [remote, local]

    def add_generic_rpc_handlers(
        self, generic_rpc_handlers: Sequence[grpc.GenericRpcHandler]
    ) -> None:
        for server in self._servers:
            server.add_generic_rpc_handlers(generic_rpc_handlers)

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        for server in self._servers:
            server.add_registered_method_handlers(service_name, method_handlers)

    def add_insecure_port(self, address: str) -> int:
        raise NotImplementedError("ports are added to the gRPC server itself")

    def add_secure_port(self, address: str, server_credentials: grpc.ServerCredentials) -> int:
        raise NotImplementedError("ports are added to the gRPC server itself")

    async def start(self) -> None:
        raise NotImplementedError("the runtime starts each server")

    async def stop(self, grace: float | None) -> None:
        raise NotImplementedError("the runtime stops each server")

    async def wait_for_termination(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        raise NotImplementedError("the runtime stops each server")
