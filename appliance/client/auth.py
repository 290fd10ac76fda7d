"""The bearer token on every call of a channel (when the coordinator has tokens configured)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import grpc

from appliance.domain.auth import CLAIMED_USER_METADATA_KEY, bearer_metadata


class _Details(NamedTuple):
    """Call details with our metadata added (grpc reads these attributes; its own
    ClientCallDetails cannot be constructed)."""

    method: str
    timeout: float | None
    metadata: list[tuple[str, str]]
    credentials: Any
    wait_for_ready: bool | None
    compression: Any


class TokenInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):  # type: ignore[misc]
    def __init__(self, token: str | None, user: str = "") -> None:
        self._headers = [bearer_metadata(token)] if token else []
        if user:  # whose per-user limits count the call while authentication is off
            self._headers.append((CLAIMED_USER_METADATA_KEY, user))

    def _with_token(self, details: grpc.ClientCallDetails) -> _Details:
        metadata = [*(details.metadata or ()), *self._headers]
        return _Details(
            details.method, details.timeout, metadata, details.credentials,
            getattr(details, "wait_for_ready", None), getattr(details, "compression", None),
        )  # fmt: skip

    def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any
    ) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(
        self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any
    ) -> Any:
        return continuation(self._with_token(details), request)


def with_token(channel: grpc.Channel, token: str | None, user: str = "") -> grpc.Channel:
    """The channel, sending `token` with every call when one is given, and `user` as the user
    it claims to be (what the coordinator goes by while authentication is off)."""
    if not token and not user:
        return channel
    return grpc.intercept_channel(channel, TokenInterceptor(token, user))
