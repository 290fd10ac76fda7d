"""A coordinator that does not lead answers the job API with one line (503, Retry-After)
before any route runs; /healthz, /readyz (which says why it is not ready), /metrics and the
API docs still answer. Kubernetes sends no traffic to it: it is never Ready."""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from appliance.server.rest.errors import error_response

REFUSED_PREFIX = "/api/"


class StandbyRefusal:
    def __init__(self, app: ASGIApp, problem: Callable[[], str | None]) -> None:
        self.app = app
        self.problem = problem

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(REFUSED_PREFIX):
            problem = self.problem()
            if problem is not None:
                refusal = error_response(503, "unavailable", problem, headers={"Retry-After": "1"})
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)
