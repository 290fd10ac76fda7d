"""A coordinator that does not lead answers every call with one line, UNAVAILABLE, before any
servicer method runs: callers retry (through the Service, at the leader), and replicas move on
to the next coordinator address they were given. GetVersion is answered by all."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from appliance.server.grpc.authn import PUBLIC
from appliance.server.grpc.errors import Ctx


class StandbyRefusal(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """`problem()` is None while this coordinator serves, else the line a caller gets."""

    def __init__(self, problem: Callable[[], str | None]) -> None:
        self._problem = problem

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        problem = self._problem()
        if handler is None or problem is None or details.method in PUBLIC:
            return handler
        return _refusing(handler, problem)


def _refusing(handler: grpc.RpcMethodHandler, problem: str) -> grpc.RpcMethodHandler:
    if handler.unary_unary is not None:

        async def unary_unary(request: Any, context: Ctx) -> Any:
            await context.abort(grpc.StatusCode.UNAVAILABLE, problem)

        return grpc.unary_unary_rpc_method_handler(
            unary_unary, handler.request_deserializer, handler.response_serializer
        )
    if handler.unary_stream is not None:

        async def unary_stream(request: Any, context: Ctx) -> AsyncIterator[Any]:
            await context.abort(grpc.StatusCode.UNAVAILABLE, problem)
            yield  # pragma: no cover  (makes this an async generator)

        return grpc.unary_stream_rpc_method_handler(
            unary_stream, handler.request_deserializer, handler.response_serializer
        )
    raise TypeError(f"no standby refusal for client-streaming methods yet: {handler}")
