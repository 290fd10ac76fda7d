"""Who uses the dashboard: a token given once in the login form opens a session. The browser
holds only the session's id, random and opaque, in an HttpOnly, SameSite=Strict cookie (never
in a URL or a log line): a leaked cookie is not a REST or gRPC credential, and logging out
ends the session for good. The token stays in this process's memory and is checked on every
request like a bearer token (a revoked token ends its sessions). Every action is a POST that
carries a per-session CSRF token and, when the browser says where it comes from, this origin.

Sessions live in memory only: a coordinator restart (or a failover to another coordinator)
logs every browser out."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from fastapi import Request, Response

from appliance.domain.auth import Principal, limited_as
from appliance.domain.errors import InvalidSpec, PermissionDenied, Unauthenticated
from appliance.server.auth import Authenticator
from appliance.services.fair_reads import reading_as

COOKIE = "appliance_session"
MAX_FORM_FIELDS = 20
MAX_FIELD = 4096
FORM_TYPE = "application/x-www-form-urlencoded"
IDLE_SECONDS = 8 * 3600.0  # a session unused this long has ended
LIFETIME_SECONDS = 24 * 3600.0  # and any session this old, however used
MAX_SESSIONS = 10_000  # beyond this, logging in ends the least recently used session
ENDED = "your session has ended; log in again"


@dataclass
class _Session:
    token: str
    opened: float
    used: float


class Sessions:
    """The open sessions of this process, by id (the module docstring says what they keep);
    one event loop uses them, so they need no lock."""

    def __init__(
        self,
        auth: Authenticator,
        clock: Callable[[], float] = time.monotonic,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        self.auth = auth
        self._key = secrets.token_bytes(32)  # CSRF tokens of this process's sessions
        self._clock = clock
        self._max = max_sessions
        self._open: OrderedDict[str, _Session] = OrderedDict()  # least recently used first

    async def caller(self, request: Request) -> Principal | None:
        """A FastAPI dependency: the logged-in caller (None: authentication is off); raises
        Unauthenticated without a valid session (unknown, expired, or its token revoked).
        What every page shows of it is kept for the templates."""
        principal = None
        if self.auth.enabled:
            principal = self._principal(request.cookies.get(COOKIE, ""))
        reading_as(limited_as(principal, None)[0])  # the page's reads in its user's turn
        self.share(request, principal)
        return principal

    def _principal(self, session_id: str) -> Principal:
        session = self._open.get(session_id)
        now = self._clock()
        if session is None:
            raise Unauthenticated(ENDED)
        if now - session.used > IDLE_SECONDS or now - session.opened > LIFETIME_SECONDS:
            del self._open[session_id]
            raise Unauthenticated(ENDED)
        try:
            principal = self.auth.principal(f"Bearer {session.token}")
        except Unauthenticated:
            del self._open[session_id]  # revoked: this session is over, whatever comes next
            raise
        session.used = now
        self._open.move_to_end(session_id)
        return principal

    async def act(self, request: Request) -> tuple[Principal | None, dict[str, str]]:
        """Who posts an action, and its form (checked as `form` says)."""
        return await self.caller(request), await self.form(request)

    def share(self, request: Request, principal: Principal | None) -> None:
        request.state.shared = {
            "who": principal,
            "auth_on": self.auth.enabled,
            "may_admin": principal is None or principal.admin,
            "csrf": self.csrf_token(request),
        }

    def csrf_token(self, request: Request) -> str:
        session = request.cookies.get(COOKIE, "")
        return hmac.new(self._key, session.encode(), hashlib.sha256).hexdigest()[:40]

    async def form(self, request: Request) -> dict[str, str]:
        """The POSTed form, once its origin and CSRF token are checked: a cross-site request
        is refused before anything is done."""
        _check_origin(request)
        if request.headers.get("content-type", "").split(";")[0].strip() != FORM_TYPE:
            raise InvalidSpec(f"send the form as {FORM_TYPE}", field="content-type")
        body = (await request.body()).decode("utf-8", errors="replace")
        try:
            parsed = parse_qs(body, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)
        except ValueError:
            message = f"a form has at most {MAX_FORM_FIELDS} fields"
            raise InvalidSpec(message, field="form") from None
        fields = {key: values[0] for key, values in parsed.items()}
        for key, value in fields.items():
            if len(value) > MAX_FIELD:
                raise InvalidSpec(f"{key} is longer than {MAX_FIELD} characters", field=key)
        sent = fields.pop("csrf", "")
        if not hmac.compare_digest(sent.encode(), self.csrf_token(request).encode()):
            raise PermissionDenied(
                "the form is stale or came from another site (CSRF token); reload the page and "
                "try again"
            )
        return fields

    def log_in(self, response: Response, request: Request, token: str) -> None:
        """Open a session for `token` (checked by the caller) and give its id as the cookie."""
        while len(self._open) >= self._max:
            self._open.popitem(last=False)
        session_id = secrets.token_urlsafe(32)
        now = self._clock()
        self._open[session_id] = _Session(token, opened=now, used=now)
        response.set_cookie(
            COOKIE, session_id, httponly=True, samesite="strict", path="/",
            secure=request.url.scheme == "https",
        )  # fmt: skip

    def log_out(self, response: Response, request: Request) -> None:
        """End the request's session (its cookie is refused from now on) and drop the cookie."""
        self._open.pop(request.cookies.get(COOKIE, ""), None)
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")


def _check_origin(request: Request) -> None:
    """Origin (or, without it, Referer) must name this host when the browser sends one."""
    claimed = request.headers.get("origin") or request.headers.get("referer")
    if not claimed or claimed == "null":
        if claimed == "null":
            raise PermissionDenied("a form from an opaque origin is refused")
        return
    parts = urlsplit(claimed)
    host = request.headers.get("host", "")
    if parts.netloc != host or parts.scheme not in ("http", "https"):
        raise PermissionDenied(f"a form posted from {parts.scheme}://{parts.netloc} is refused")
