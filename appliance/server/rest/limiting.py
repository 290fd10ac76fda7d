"""Per-user limits at the HTTP door: the request rate of /api/ calls, in one pure ASGI
middleware that answers 429 with Retry-After from the headers alone (before a body is read),
and a stream slot held by each long-lived answer (an event stream, a followed log, a
dashboard feed) for as long as its body is sent. Over a cap: 429 with Retry-After.

The rate limit runs outside the audit middleware (nothing of a refused request is read), so
it records its own refusals, coalesced per user and second (services/audit.py
`record_limited`); never the token.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator

from starlette.types import ASGIApp, Receive, Scope, Send

from appliance.domain.audit import AuditEvent, Door, Outcome
from appliance.domain.auth import CLAIMED_USER_HEADER, Principal, limited_as
from appliance.domain.errors import LimitExceeded, Unauthenticated
from appliance.domain.limits import retry_after_seconds
from appliance.server.auth import Authenticator
from appliance.server.rest.errors import error_response, status_for
from appliance.services.audit import AuditTrail, request_id
from appliance.services.fair_reads import reading_as
from appliance.services.limits import Limits, StreamSlot

API_PREFIX = "/api/"
_CLAIMED = CLAIMED_USER_HEADER.encode()
_REQUEST_ID = b"x-request-id"


class RateLimit:
    """Takes a token of the caller's bucket for each /api/ request; 429 when there is none.
    A request whose token is not valid passes on, to be refused 401 by its route."""

    def __init__(
        self, app: ASGIApp, auth: Authenticator, limits: Limits, trail: AuditTrail | None = None
    ) -> None:
        self.app = app
        self.auth = auth
        self.limits = limits
        self.trail = trail

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(API_PREFIX):
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        try:
            principal = self.auth.caller(headers.get(b"authorization", b"").decode("latin-1"))
        except Unauthenticated:
            await self.app(scope, receive, send)
            return
        claimed = headers.get(_CLAIMED, b"").decode("latin-1")
        user, groups = limited_as(principal, claimed)
        reading_as(user)
        try:
            await self.limits.admit_call(user, groups, "rest")
        except LimitExceeded as exc:
            if self.trail is not None:
                self.trail.record_limited(
                    _refused(scope, headers, principal, user, exc), exc.limit
                )
            await refusal(exc)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _refused(
    scope: Scope,
    headers: dict[bytes, bytes],
    principal: Principal | None,
    user: str,
    exc: LimitExceeded,
) -> AuditEvent:
    """The audit record of a request the rate limit refused (its route not yet known)."""
    status, _ = status_for(exc)
    client = scope.get("client")
    return AuditEvent(
        at=0.0, request_id=request_id(headers.get(_REQUEST_ID, b"").decode("latin-1")),
        user=user, groups=principal.groups if principal else (),
        admin=principal.admin if principal else True,
        source=f"{client[0]}:{client[1]}" if client else "", door=Door.REST,
        verb=str(scope["method"]).lower(), object_kind="path", object_name=scope["path"],
        outcome=Outcome.REFUSED, reason=f"{status}: {exc.message} [limit {exc.limit}]",
    )  # fmt: skip


def refusal(exc: LimitExceeded) -> ASGIApp:
    status, code = status_for(exc)
    headers = {"Retry-After": str(retry_after_seconds(exc.retry_after))}
    return error_response(status, code, exc.message, headers=headers)


def open_stream(
    limits: Limits, by: Principal | None, claimed: str | None, door: str = "rest"
) -> StreamSlot:
    """A stream slot of the caller (LimitExceeded, a 429, when they hold their cap)."""
    user, groups = limited_as(by, claimed)
    return limits.open_stream(user, groups, door)


def holding(slot: StreamSlot, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """`body`, with `slot` given back when it ends, or when it is dropped unsent (a client
    gone before the first byte: its generator never starts, so no `finally` of its runs)."""

    async def held() -> AsyncIterator[bytes]:
        try:
            async for chunk in body:
                yield chunk
        finally:
            slot.release()

    frames = held()
    weakref.finalize(frames, slot.release)
    return frames
