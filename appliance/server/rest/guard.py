"""What a request must pass before its body is read: the caller's token (when authentication is
on) and the body's size.

FastAPI reads and parses a body before any dependency runs, so a 200 MB POST without a token
was read whole (137 -> 708 MiB, the loop stalled 1.2 s) only to be answered 401. This pure ASGI
middleware refuses such a request from its headers: 401 without a valid token, 413 when the
declared length is over the limit; a body sent without a length is counted as it arrives and
refused with 413 the moment it passes the limit.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from appliance.domain.errors import Unauthenticated
from appliance.server.auth import Authenticator
from appliance.server.rest.errors import error_response, status_error, status_for

_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})


class RequestGuard:
    def __init__(
        self,
        app: ASGIApp,
        auth: Authenticator,
        max_body_bytes: int,
        cookie_paths: tuple[str, ...] = (),
    ) -> None:
        self.app = app
        self.auth = auth
        self.max_body_bytes = max_body_bytes
        self.cookie_paths = cookie_paths  # their door checks its own session (web/session.py)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _WITH_BODY:
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope["headers"]}
        if self.auth.enabled and not scope["path"].startswith(self.cookie_paths):
            authorization = headers.get(b"authorization", b"").decode("latin-1")
            try:
                self.auth.caller(authorization or None)
            except Unauthenticated as exc:
                status, code = status_for(exc)
                await error_response(status, code, exc.message)(scope, receive, send)
                return
        declared = headers.get(b"content-length")
        if declared is not None and (
            not declared.isdigit() or int(declared) > self.max_body_bytes
        ):
            await status_error(413, self._message, "body")(scope, receive, send)
            return
        await self.app(scope, self._counted(receive), send)

    @property
    def _message(self) -> str:
        return f"the request body is larger than {self.max_body_bytes} bytes"

    def _counted(self, receive: Receive) -> Receive:
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body_bytes:
                    raise HTTPException(413, self._message)  # FastAPI passes it on as it is
            return message

        return counted
