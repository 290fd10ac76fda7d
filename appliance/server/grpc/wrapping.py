"""The base of the interceptors that wrap each method's handler (authentication, metrics): the
wrapped handler of a method is built once, as the server's handlers never change."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

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
