"""The FastAPI application: the job API under /api/v1, health, readiness and metrics.

Routers are thin (convert, call a JobService use case, convert back); errors are mapped to
HTTP once, in appliance.server.rest.errors.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from fastapi import FastAPI, Response

import appliance
from appliance.server.auth import Authenticator
from appliance.server.rest.arrays import arrays_router
from appliance.server.rest.audit import AuditRequests
from appliance.server.rest.audit_log import audit_router
from appliance.server.rest.auth import caller_dependency
from appliance.server.rest.controls import controls_router
from appliance.server.rest.errors import install_error_handlers
from appliance.server.rest.guard import RequestGuard
from appliance.server.rest.holds import holds_router
from appliance.server.rest.jobs import jobs_router
from appliance.server.rest.limiting import RateLimit
from appliance.server.rest.limits import limits_router
from appliance.server.rest.logs import logs_router
from appliance.server.rest.metrics import LatencyMiddleware
from appliance.server.rest.models import ReadyOut, StatusOut
from appliance.server.rest.nodes import nodes_router
from appliance.server.rest.queues import queues_router
from appliance.server.rest.reservations import reservations_router
from appliance.server.rest.standby import StandbyRefusal
from appliance.services.use_cases import UseCases

DESCRIPTION = (
    "REST door of the appliance's coordinator: submit, list, inspect, cancel and watch wsjobs. "
    'Every error has the body `{"error": {"code", "message", "field"}}`.'
)


def create_app(
    uses: UseCases,
    auth: Authenticator | None = None,
    max_body_bytes: int = 4 << 20,
    standby: Callable[[], str | None] = lambda: None,
    cookie_paths: tuple[str, ...] = (),
) -> FastAPI:
    """Build the app over the coordinator's services (shared with gRPC); `standby` says why
    this coordinator does not serve the API now (server/rest/standby.py), None while it does.
    POSTs under `cookie_paths` are
    authenticated by the door that serves them (the web door's session), not by a bearer
    token. /docs is the web door's (Swagger UI from local assets)."""
    app = FastAPI(
        title="appliance",
        version=appliance.__version__,
        description=DESCRIPTION,
        docs_url=None,
        redoc_url=None,
    )
    auth = auth or Authenticator(None)
    caller = caller_dependency(auth)
    install_error_handlers(app)
    # Added last, so it runs first: nothing reads a body the guard refuses.
    app.add_middleware(
        LatencyMiddleware,
        latency=uses.metrics.metrics.http_latency,
        routes=app.router.routes,
        clock=time.perf_counter,
    )
    app.add_middleware(
        RequestGuard, auth=auth, max_body_bytes=max_body_bytes, cookie_paths=cookie_paths
    )
    # Outside the guard: it records what the guard refuses too.
    app.add_middleware(AuditRequests, trail=uses.audit, auth=auth, cookie_paths=cookie_paths)
    app.add_middleware(RateLimit, auth=auth, limits=uses.limits, trail=uses.audit)  # no body read
    app.add_middleware(StandbyRefusal, problem=standby)
    app.include_router(jobs_router(uses.jobs, uses.bulk_cancels, caller, uses.limits))
    app.include_router(controls_router(uses.jobs, caller))
    app.include_router(holds_router(uses.holds, caller))
    app.include_router(nodes_router(uses.jobs, uses.nodes, caller))
    app.include_router(queues_router(uses.queues, uses.usage, caller))
    app.include_router(audit_router(uses.audit, caller))
    app.include_router(logs_router(uses.logs, caller, uses.limits))
    app.include_router(limits_router(uses.limits, caller))
    app.include_router(arrays_router(uses.arrays, caller))
    app.include_router(reservations_router(uses.reservations, caller))

    @app.get("/healthz", tags=["health"], response_model=StatusOut)
    async def healthz() -> StatusOut:
        """The process is up and serving HTTP."""
        return StatusOut(status="ok")

    @app.get(
        "/readyz",
        tags=["health"],
        response_model=ReadyOut,
        responses={
            503: {
                "model": ReadyOut,
                "description": "A standby coordinator (another one leads), or the store or the "
                "backend (the Kubernetes API) cannot be reached.",
            }
        },
    )
    async def readyz(response: Response) -> ReadyOut:
        """This coordinator leads (or is the only one), the store answers queries and the
        backend can start replicas. `warnings`: what was found at start that will fail jobs
        later (the pool's largest job cannot fit the nodes)."""
        problem = await uses.readiness.problem()
        warnings = list(uses.readiness.warnings)
        if problem:
            response.status_code = 503
            return ReadyOut(status="unavailable", reason=problem, warnings=warnings)
        return ReadyOut(status="ok", warnings=warnings)

    @app.get(
        "/metrics",
        tags=["health"],
        response_class=Response,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
    )
    async def prometheus_metrics() -> Response:
        """Prometheus metrics: jobs submitted (by door) and finished, the queue, the
        scheduler, the pool, gRPC calls and HTTP requests (services/metrics.py)."""
        scrape = uses.metrics
        return Response(await scrape.render(), media_type=scrape.content_type)

    return app
