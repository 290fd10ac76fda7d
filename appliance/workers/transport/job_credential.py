"""Only the replicas of one job (and one attempt of it) talk to each other.

Every replica of a job holds the job's data-plane token (APPLIANCE_DATAPLANE_TOKEN, issued by
the coordinator: server/replica_tokens.py). Each data-plane call a replica makes carries it
(`PeerChannels.metadata`), and each replica's server refuses, before any servicer method runs
or any request is parsed, a call that does not carry it: UNAUTHENTICATED, and the job goes on
as if the call had never come. Without it any process that can reach a replica's port could
shut the job down, read its weights or push gradients into it.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc

from appliance.domain.auth import AUTH_METADATA_KEY, DATAPLANE_TOKEN_ENV, bearer_metadata

REFUSAL = "data-plane calls need the job's credential"
# Enough for any token the coordinator issues; a longer header is refused unread.
_MAX_HEADER = 512


class MissingCredential(Exception):
    """The replica was started without its job's data-plane token."""


def dataplane_token(environ: Mapping[str, str]) -> str:
    """The job's data-plane token from the replica's environment (never its command line,
    which every local user can read)."""
    token = environ.get(DATAPLANE_TOKEN_ENV, "")
    if not token:
        raise MissingCredential(
            f"{DATAPLANE_TOKEN_ENV} is not set: replicas are started by the coordinator, "
            "which gives each its job's data-plane token"
        )
    return token


def call_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """What every data-plane call of the job carries."""
    return (bearer_metadata(token),)


class DataPlaneAuthentication(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses every call that does not carry `token`."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or self._carries_token(details.invocation_metadata or ()):
            return handler
        return _refusal(handler)

    def _carries_token(self, metadata: Any) -> bool:
        for key, value in metadata:
            if key == AUTH_METADATA_KEY and isinstance(value, str) and len(value) <= _MAX_HEADER:
                return hmac.compare_digest(value.encode(), self._expected)
        return False


async def _refuse(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, REFUSAL)


def _refusal(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of the same kind that refuses the call. Requests stay undecoded bytes: a
    stranger's message is never parsed."""
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(_refuse)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(_refuse)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(_refuse)
    return grpc.stream_stream_rpc_method_handler(_refuse)
