"""Who uses the dashboard: a token given once in the login form, kept in an HttpOnly,
SameSite=Strict cookie (never in a URL or a log line), checked on every request like a
bearer token (a revoked token logs the browser out). Every action is a POST that carries a
per-session CSRF token and, when the browser says where it comes from, this origin."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import parse_qs, urlsplit

from fastapi import Request, Response

from appliance.domain.auth import Principal
from appliance.domain.errors import InvalidSpec, PermissionDenied
from appliance.server.auth import Authenticator

COOKIE = "appliance_session"
MAX_FORM_FIELDS = 20
MAX_FIELD = 4096
FORM_TYPE = "application/x-www-form-urlencoded"


class Sessions:
    def __init__(self, auth: Authenticator) -> None:
        self.auth = auth
        self._key = secrets.token_bytes(32)  # CSRF tokens of this process's sessions

    async def caller(self, request: Request) -> Principal | None:
        """A FastAPI dependency: the logged-in caller (None: authentication is off); raises
        Unauthenticated without a valid session. What every page shows of it is kept for
        the templates."""
        token = request.cookies.get(COOKIE)
        principal = self.auth.caller(f"Bearer {token}" if token else None)
        self.share(request, principal)
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
        response.set_cookie(
            COOKIE, token, httponly=True, samesite="strict", path="/",
            secure=request.url.scheme == "https",
        )  # fmt: skip

    def log_out(self, response: Response) -> None:
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
