"""The base of the interceptors that wrap each method's handler (authentication, metrics): the
wrapped handler of a method is built once, as the server's handlers never change."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc


class HandlerWrapping(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(self) -> None:
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        method: str = details.method
        if handler is None or not self.wraps(method):
            return handler  # no such method: gRPC answers UNIMPLEMENTED
        known = self._wrapped.get(method)
        if known is not None and known[0] is handler:
            return known[1]
        wrapped = self.wrap(method, handler)
        self._wrapped[method] = (handler, wrapped)
        return wrapped

    def wraps(self, method: str) -> bool:
        """Whether to wrap `method` (its full name, /package.Service/Method)."""
        return True

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        raise NotImplementedError


def observed(
    handler: grpc.RpcMethodHandler,
    begin: Callable[[], Any],
    end: Callable[[Any, Any, Any, BaseException | None, Any], None],
) -> grpc.RpcMethodHandler:
    """`handler` with `end(begun, request, context, failure, response)` called once each call
    ends (the failure None when it returned; the response a unary call's, else None), `begun`
    being what `begin()` gave as it started. A stream ends with its last message, or when it
    fails."""
    args = (handler.request_deserializer, handler.response_serializer)
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(_unary(handler.unary_unary, begin, end), *args)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(
            _unary(handler.stream_unary, begin, end), *args
        )
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            _stream(handler.unary_stream, begin, end), *args
        )
    return grpc.stream_stream_rpc_method_handler(_stream(handler.stream_stream, begin, end), *args)


def _unary(behaviour: Any, begin: Callable[[], Any], end: Callable[..., None]) -> Any:
    async def ended(request: Any, context: Any) -> Any:
        begun = begin()
        try:
            response = await behaviour(request, context)
        except BaseException as exc:
            end(begun, request, context, exc, None)
            raise
        end(begun, request, context, None, response)
        return response

    return ended


def _stream(behaviour: Any, begin: Callable[[], Any], end: Callable[..., None]) -> Any:
    if not inspect.isasyncgenfunction(behaviour):  # it writes with context.write
        return _unary(behaviour, begin, end)

    async def ended(request: Any, context: Any) -> AsyncIterator[Any]:
        begun = begin()
        try:
            async with contextlib.aclosing(behaviour(request, context)) as responses:
                async for response in responses:
                    yield response
        except BaseException as exc:
            end(begun, request, context, exc, None)
            raise
        end(begun, request, context, None, None)

    return ended
