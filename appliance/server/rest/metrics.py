"""The HTTP door's part of the metrics (services/metrics.py): each request's latency under its
route template, so /api/v1/jobs/{job_id} is one series, not one per id.

Kept by hand rather than taken from prometheus-fastapi-instrumentator or starlette-exporter:
both find a request's template by matching it against every route again, per request; this
reads the route the router matched from the scope (one dict lookup), times to the start of
the response without wrapping the body (streams untouched), and is one class.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from prometheus_client import Histogram
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Every request that matched no route (404s, probes of random paths): one fixed series.
UNMATCHED = "unmatched"


class LatencyMiddleware:
    """Pure ASGI middleware (no per-request task, streaming untouched)."""

    def __init__(
        self,
        app: ASGIApp,
        latency: Histogram,
        routes: Sequence[BaseRoute],
        clock: Callable[[], float],
    ) -> None:
        self.app = app
        self.latency = latency
        self.clock = clock
        self._routes = routes
        self._templates: dict[object, str] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = self.clock()

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.latency.labels(
                    method=scope["method"], route=self._template(scope),
                    status=str(message["status"]),
                ).observe(self.clock() - started)  # fmt: skip
            await send(message)

        await self.app(scope, receive, timed_send)

    def _template(self, scope: Scope) -> str:
        """The path template of the route that served the request. FastAPI's own routes put
        themselves in the scope; Starlette routes (/docs, /openapi.json) put only their
        endpoint, whose template is looked up once."""
        route = scope.get("route")
        template = getattr(route, "path", None)
        if template:
            return str(template)
        endpoint = scope.get("endpoint")
        if endpoint is None:
            return UNMATCHED
        found = self._templates.get(endpoint)
        if found is None:
            paths = (getattr(r, "path", None) for r in self._routes if _endpoint(r) is endpoint)
            found = self._templates[endpoint] = next((p for p in paths if p), UNMATCHED)
        return found


def _endpoint(route: BaseRoute) -> object:
    return getattr(route, "endpoint", None)
