"""Domain errors become gRPC statuses here, once, for every servicer method."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias, TypeVar

import grpc

from appliance.domain.errors import ApplianceError, LimitExceeded
from appliance.domain.limits import retry_after_seconds
from appliance.protocol.errors import FIELD_KEY, RETRY_AFTER_KEY, code_for

log = logging.getLogger(__name__)
Req = TypeVar("Req")
Resp = TypeVar("Resp")
Self = TypeVar("Self")
Ctx: TypeAlias = grpc.aio.ServicerContext[Any, Any]


async def abort(context: grpc.aio.ServicerContext[Any, Any], exc: Exception) -> None:
    """End the call with the status `exc` maps to (always raises)."""
    if isinstance(exc, ApplianceError):
        if exc.field:
            context.set_trailing_metadata(((FIELD_KEY, exc.field),))
        elif isinstance(exc, LimitExceeded):  # when the same call may pass
            wait = str(retry_after_seconds(exc.retry_after))
            context.set_trailing_metadata(((RETRY_AFTER_KEY, wait),))
        await context.abort(code_for(exc), exc.message)
    log.exception("internal error", exc_info=exc)
    await context.abort(grpc.StatusCode.INTERNAL, "internal error; see the coordinator's log")


def unary(
    method: Callable[[Self, Req, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]],
) -> Callable[[Self, Req, grpc.aio.ServicerContext[Any, Any]], Awaitable[Resp]]:
    @functools.wraps(method)
    async def wrapper(
        self: Self, request: Req, context: grpc.aio.ServicerContext[Any, Any]
    ) -> Resp:
        try:
            return await method(self, request, context)
        except Exception as exc:
            if isinstance(exc, grpc.aio.AbortError):
                raise
            await abort(context, exc)
            raise  # unreachable: abort raises

    return wrapper


def stream(
    method: Callable[[Self, Req, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Resp]],
) -> Callable[[Self, Req, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Resp]]:
    @functools.wraps(method)
    async def wrapper(
        self: Self, request: Req, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Resp]:
        try:
            async for item in method(self, request, context):
                yield item
        except Exception as exc:
            if isinstance(exc, grpc.aio.AbortError):
                raise
            await abort(context, exc)

    return wrapper
