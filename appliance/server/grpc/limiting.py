"""Per-user limits at the gRPC door, in one interceptor inside Authentication (so it knows the
caller): every ClusterService call takes a token of its user's bucket, and the long-lived
streams (WatchJob, WatchJobs, a followed GetJobLogs) hold one of their user's stream slots
until they end. Over a cap the call ends RESOURCE_EXHAUSTED, with `retry-after` (seconds) in
its trailing metadata, and the limit's name is left for the audit interceptor around it
(`refused_by`), which records such refusals coalesced (services/audit.py). The replicas'
ReplicaControl calls are not limited.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextvars import ContextVar
from typing import Any

import grpc

from appliance.domain.auth import CLAIMED_USER_METADATA_KEY, limited_as
from appliance.domain.errors import LimitExceeded
from appliance.server.grpc.authn import CLUSTER, PUBLIC, caller
from appliance.server.grpc.errors import Ctx, abort
from appliance.server.grpc.wrapping import HandlerWrapping
from appliance.services.fair_reads import reading_as
from appliance.services.limits import Limits, StreamSlot

LONG_LIVED = frozenset({"WatchJob", "WatchJobs", "GetJobLogs"})
# The limit that refused this call, if one did: each call runs in its own task, so in its own
# context, and the interceptors around this one await it in that task.
_REFUSED_BY: ContextVar[str] = ContextVar("grpc_refused_by_limit", default="")


def refused_by() -> str:
    """The per-user limit that refused the current call ("" when none did)."""
    return _REFUSED_BY.get()


class Limiting(HandlerWrapping):
    def __init__(self, limits: Limits) -> None:
        super().__init__()
        self._limits = limits

    def wraps(self, method: str) -> bool:
        return method not in PUBLIC and method.lstrip("/").startswith(f"{CLUSTER}/")

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        name = method.rpartition("/")[2]
        if handler.unary_unary is not None:
            return self._unary(handler)
        if handler.unary_stream is not None:
            return self._stream(handler, long_lived=name in LONG_LIVED)
        return handler

    def _unary(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        behaviour = handler.unary_unary

        async def unary_unary(request: Any, context: Ctx) -> Any:
            await self._admit(context)
            return await behaviour(request, context)

        return grpc.unary_unary_rpc_method_handler(
            unary_unary, handler.request_deserializer, handler.response_serializer
        )

    def _stream(self, handler: grpc.RpcMethodHandler, *, long_lived: bool) -> Any:
        behaviour = handler.unary_stream

        async def unary_stream(request: Any, context: Ctx) -> AsyncIterator[Any]:
            slot = await self._admit(context, stream=long_lived and _follows(request))
            try:
                async with contextlib.aclosing(behaviour(request, context)) as responses:
                    async for response in responses:
                        yield response
            finally:
                if slot is not None:
                    slot.release()

        return grpc.unary_stream_rpc_method_handler(
            unary_stream, handler.request_deserializer, handler.response_serializer
        )

    async def _admit(self, context: Ctx, *, stream: bool = False) -> StreamSlot | None:
        """Take a token for the call (and a stream slot for a long-lived one), or end it."""
        claimed = dict(context.invocation_metadata() or ()).get(CLAIMED_USER_METADATA_KEY)
        user, groups = limited_as(caller(), claimed)
        reading_as(user)
        try:
            await self._limits.admit_call(user, groups, "grpc")
            return self._limits.open_stream(user, groups, "grpc") if stream else None
        except LimitExceeded as exc:  # RESOURCE_EXHAUSTED, with retry-after (errors.py)
            _REFUSED_BY.set(exc.limit)
            await abort(context, exc)
            raise  # unreachable: abort raises


def _follows(request: Any) -> bool:
    """Whether a GetJobLogs call follows its log (a watch always lives on)."""
    return bool(getattr(request, "follow", True))
