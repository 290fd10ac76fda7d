"""Who calls: every gRPC call is authenticated here, in one interceptor, before any servicer
method runs.

- ClusterService: the bearer token names a Principal (server/auth.py), which the method reads
  with `caller()`: None while authentication is off. `GetVersion` needs no token.
- ReplicaControl: with authentication on, the call carries the replica token of the job it
  names (server/replica_tokens.py), and no other job's.

A method of a service not named here is refused: a new service is authenticated on purpose,
never by default. A streaming call is checked again before each message it sends and at least
every STREAM_RECHECK_SECONDS (server/streams.py), so a token that expires or is revoked while it
streams (WatchJob, a followed log) ends it within about a second, quiet or not.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextvars import ContextVar
from typing import Any, TypeAlias

import grpc

from appliance._proto.v1 import cluster_pb2, control_pb2
from appliance.domain.auth import AUTH_METADATA_KEY, Principal
from appliance.domain.errors import Unauthenticated
from appliance.server.auth import Authenticator, bearer_token
from appliance.server.grpc.errors import Ctx, abort
from appliance.server.grpc.health import HEALTH, REFLECTION
from appliance.server.grpc.wrapping import HandlerWrapping
from appliance.server.replica_tokens import ReplicaTokens
from appliance.server.streams import Idle, rechecked
from appliance.services.fair_reads import reading_as

# Checks a call (its request and metadata) and returns its principal; raises ApplianceError.
Check: TypeAlias = Callable[[Any, Mapping[str, str]], Principal | None]

CLUSTER = cluster_pb2.DESCRIPTOR.services_by_name["ClusterService"].full_name
CONTROL = control_pb2.DESCRIPTOR.services_by_name["ReplicaControl"].full_name
# What probes and grpcurl call, with no token, on any coordinator (server/grpc/health.py).
PROBES = frozenset({f"/{HEALTH}/Check", f"/{HEALTH}/Watch", f"/{REFLECTION}/ServerReflectionInfo"})
PUBLIC = frozenset({f"/{CLUSTER}/GetVersion"}) | PROBES

_CALLER: ContextVar[Principal | None] = ContextVar("grpc_caller")  # no default: fail closed


def caller() -> Principal | None:
    """The authenticated caller of the ClusterService call being served (None while
    authentication is off). Raises if the call was not authenticated: a servicer served
    without the Authentication interceptor must not run as if authentication were off."""
    try:
        return _CALLER.get()
    except LookupError:
        raise RuntimeError(
            "no authenticated caller: serve with the Authentication interceptor"
        ) from None


def known_caller() -> Principal | None:
    """The caller once authenticated, else None (for the audit log, server/grpc/audit.py,
    which wraps this interceptor and reads who called after the call)."""
    return _CALLER.get(None)


class Authentication(HandlerWrapping):
    """Authenticates users (ClusterService) and replicas (ReplicaControl). `replica_tokens`
    is None exactly when authentication is off."""

    def __init__(self, users: Authenticator, replica_tokens: ReplicaTokens | None) -> None:
        super().__init__()
        self._users = users
        self._replica_tokens = replica_tokens
        self._checks: dict[str, Check] = {CLUSTER: self._user, CONTROL: self._replica}

    def wraps(self, method: str) -> bool:
        return method not in PUBLIC

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        service = method.lstrip("/").partition("/")[0]
        return _wrap(handler, self._checks.get(service, _refuse))

    def _user(self, request: Any, metadata: Mapping[str, str]) -> Principal | None:
        return self._users.caller(metadata.get(AUTH_METADATA_KEY))

    def _replica(self, request: Any, metadata: Mapping[str, str]) -> Principal | None:
        reading_as(f"job:{str(request.job_id)[:64]}")  # a job's replicas: a flow of their own
        if self._replica_tokens is None:
            return None
        job_id: str = request.job_id
        token = bearer_token(metadata.get(AUTH_METADATA_KEY))
        if token is None or not self._replica_tokens.valid(job_id, request.attempt, token):
            raise Unauthenticated(
                f"replica calls for {job_id or 'a job'} need the replica token of that job "
                f"and attempt ({request.attempt})"
            )
        return None


def _refuse(request: Any, metadata: Mapping[str, str]) -> Principal | None:
    raise Unauthenticated("this service is not open to callers")


async def _authenticate(check: Check, request: Any, context: Ctx) -> None:
    try:
        principal = check(request, dict(context.invocation_metadata() or ()))
    except Exception as exc:  # a domain error maps to its status; anything else is INTERNAL
        await abort(context, exc)
    _CALLER.set(principal)  # each call runs in its own task, so in its own context


def _wrap(handler: grpc.RpcMethodHandler, check: Check) -> grpc.RpcMethodHandler:
    if handler.unary_unary is not None:
        unary = handler.unary_unary

        async def unary_unary(request: Any, context: Ctx) -> Any:
            await _authenticate(check, request, context)
            return await unary(request, context)

        return grpc.unary_unary_rpc_method_handler(
            unary_unary, handler.request_deserializer, handler.response_serializer
        )
    if handler.unary_stream is not None:
        streaming = handler.unary_stream

        async def unary_stream(request: Any, context: Ctx) -> AsyncIterator[Any]:
            await _authenticate(check, request, context)

            async def recheck() -> None:
                await _authenticate(check, request, context)

            # A stream lives on: a token that expires or is revoked meanwhile ends it.
            async for response in rechecked(streaming(request, context), recheck):
                if response is not Idle.TICK:
                    yield response

        return grpc.unary_stream_rpc_method_handler(
            unary_stream, handler.request_deserializer, handler.response_serializer
        )
    raise TypeError(f"no authentication for client-streaming methods yet: {handler}")
