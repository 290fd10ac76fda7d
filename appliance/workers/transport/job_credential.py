"""Only the replicas of one job (and one attempt of it) talk to each other.

Every replica of a job holds the job's data-plane token (APPLIANCE_DATAPLANE_TOKEN, issued by
the coordinator: server/replica_tokens.py). Each data-plane call a replica makes carries it
(`PeerChannels.metadata`), and each replica's server refuses, before any servicer method runs
or any request is parsed, a call that does not carry it: UNAUTHENTICATED, and the job goes on
as if the call had never come. Without it any process that can reach a replica's port could
shut the job down, read its weights or push gradients into it.

With TLS (replica_tls.py) the server also refuses a caller whose client certificate, though of
the coordinator's CA, is not of this job's attempt: a second check, on the certificate the
handshake verified, made in the handler before its request is decoded (gRPC shows the
connection's certificate to the handler, not to the interceptor).
"""

from __future__ import annotations

import hmac
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import grpc

from appliance.domain.auth import AUTH_METADATA_KEY, DATAPLANE_TOKEN_ENV, bearer_metadata
from appliance.workers.transport.replica_tls import ReplicaTls

REFUSAL = "data-plane calls need the job's credential"
CERTIFICATE_REFUSAL = "data-plane calls need a certificate of the job's attempt"
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
    """Refuses every call that does not carry `token`, and with `tls` every call whose client
    certificate is not of the job's attempt."""

    def __init__(self, token: str, tls: ReplicaTls | None = None) -> None:
        self._expected = f"Bearer {token}".encode()
        self._tls = tls

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None:
            return handler
        if not self._carries_token(details.invocation_metadata or ()):
            return _refusal(handler)
        return handler if self._tls is None else _certificate_checked(handler, self._tls)

    def _carries_token(self, metadata: Any) -> bool:
        for key, value in metadata:
            if key == AUTH_METADATA_KEY and isinstance(value, str) and len(value) <= _MAX_HEADER:
                return hmac.compare_digest(value.encode(), self._expected)
        return False


async def _refuse(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, REFUSAL)


def _certificate_checked(handler: grpc.RpcMethodHandler, tls: ReplicaTls) -> grpc.RpcMethodHandler:
    """`handler`, taking its request as bytes and decoding it only once the caller's
    certificate is found to be of the job's attempt."""
    decode: Callable[[bytes], Any] = handler.request_deserializer or (lambda raw: raw)
    encode = handler.response_serializer

    async def check(context: grpc.aio.ServicerContext[Any, Any]) -> None:
        if not tls.is_peer(context.auth_context()):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, CERTIFICATE_REFUSAL)

    async def decoded(raw: AsyncIterator[bytes]) -> AsyncIterator[Any]:
        async for message in raw:
            yield decode(message)

    async def answered(result: Any) -> Any:
        return await result if inspect.isawaitable(result) else result

    if handler.unary_unary is not None:
        call = handler.unary_unary

        async def unary_unary(raw: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            await check(context)
            return await answered(call(decode(raw), context))

        return grpc.unary_unary_rpc_method_handler(unary_unary, response_serializer=encode)
    if handler.stream_unary is not None:
        take = handler.stream_unary

        async def stream_unary(
            raw: AsyncIterator[bytes], context: grpc.aio.ServicerContext[Any, Any]
        ) -> Any:
            await check(context)
            return await answered(take(decoded(raw), context))

        return grpc.stream_unary_rpc_method_handler(stream_unary, response_serializer=encode)
    streamed = handler.unary_stream or handler.stream_stream
    streams_in = handler.unary_stream is None

    async def streaming(raw: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await check(context)
        result = streamed(decoded(raw) if streams_in else decode(raw), context)
        if inspect.isasyncgen(result):
            async for answer in result:
                yield answer
        else:  # it writes its answers through the context
            await answered(result)

    make = (
        grpc.stream_stream_rpc_method_handler
        if streams_in
        else grpc.unary_stream_rpc_method_handler
    )
    return make(streaming, response_serializer=encode)


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
