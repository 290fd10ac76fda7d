"""Templates, the filters they use, and HTML answers for errors: a refused request is a page
that says why (naming the field), never a 500 or a JSON body in the browser."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from jinja2 import Environment, FileSystemLoader, select_autoescape

from appliance.domain.errors import ApplianceError, Unauthenticated
from appliance.server.rest.audit import refused
from appliance.server.rest.errors import status_for

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
PREFIX = "/ui"
LOGIN = f"{PREFIX}/login"
# Every page: never framed by another site (clickjacking), and only this origin's scripts,
# styles, images and connections (the templates have no inline script or style; htmx is told
# not to add its own <style> in base.html).
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
NOT_FRAMED = {"X-Frame-Options": "DENY", "Content-Security-Policy": "frame-ancestors 'none'"}
PAGE_HEADERS = {
    **NOT_FRAMED,
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def age(since: float, now: float) -> str:
    """1m59s, 3h2m, 4d5h: like kubectl, two units at most."""
    if not since:
        return "-"
    left = max(0, int(now - since))
    days, left = divmod(left, 86_400)
    hours, left = divmod(left, 3_600)
    minutes, seconds = divmod(left, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (seconds, "s")]
    while len(parts) > 1 and parts[0][0] == 0:
        parts.pop(0)
    return "".join(f"{n}{unit}" for n, unit in parts[:2])


def rfc3339(when: float) -> str:
    if not when:
        return "-"
    moment = datetime.datetime.fromtimestamp(when, datetime.UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


templates = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
templates.filters["rfc3339"] = rfc3339
templates.globals["PREFIX"] = PREFIX


def page(request: Request, name: str, context: dict[str, Any], status: int = 200) -> HTMLResponse:
    """`name` rendered; an htmx request for a live part gets only its fragment (`_name`)."""
    if request.headers.get("hx-request") and request.headers.get("hx-target"):
        name = "_" + name
    values = {"request": request, **getattr(request.state, "shared", {}), **context}
    return HTMLResponse(templates.get_template(name).render(values), status, PAGE_HEADERS)


def error_page(request: Request, status: int, message: str, field: str | None) -> HTMLResponse:
    return page(request, "error.html", {"status": status, "message": message, "field": field},
                status)  # fmt: skip


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    first = exc.errors()[0] if exc.errors() else {}
    where = [str(p) for p in first.get("loc", ()) if p not in ("query", "path", "body")]
    field = ".".join(where) or None
    return f"{field or 'the request'}: {first.get('msg', 'is not valid')}", field


class HtmlRoute(APIRoute):
    """Errors of a page or an action as a page (status and message), and a missing or
    revoked login as a redirect to the login form. A page (an HTMLResponse route) answers
    HEAD as well as GET; a live feed does not (its body never ends)."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        if self.methods and "GET" in self.methods and self.response_class is HTMLResponse:
            self.methods.add("HEAD")

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except Unauthenticated as exc:
                refused(request, exc.message)  # a redirect, but a refusal for the audit log
                return RedirectResponse(LOGIN, 303)
            except ApplianceError as exc:
                status, _ = status_for(exc)
                if status >= 500:
                    log.error("page %s failed: %s", request.url.path, exc.message)
                else:
                    refused(request, exc.message)
                return error_page(request, status, exc.message, exc.field)
            except RequestValidationError as exc:
                message, field = _validation_message(exc)
                return error_page(request, 422, message, field)

        return route
