"""Add the web door to the coordinator's HTTP app: the dashboard's pages, actions and live
feeds, its static assets, and Swagger UI at /docs from the same local assets (an offline
cluster gets a working /docs)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from appliance.server.auth import Authenticator
from appliance.server.web.actions import actions_router
from appliance.server.web.pages import pages_router
from appliance.server.web.render import HERE, NOT_FRAMED, PREFIX
from appliance.server.web.session import Sessions
from appliance.server.web.streams import streams_router
from appliance.services.use_cases import UseCases

STATIC = HERE / "static"
VENDOR = f"{PREFIX}/static/vendor"
# The paths whose POSTs the web door authenticates itself (its session cookie), not the
# REST door's bearer-token guard.
COOKIE_PATHS = (f"{PREFIX}/",)


def install_web(app: FastAPI, uses: UseCases, auth: Authenticator) -> None:
    """The dashboard on `app` (made with docs_url=None: /docs is served here)."""
    sessions = Sessions(auth)
    app.mount(f"{PREFIX}/static", StaticFiles(directory=STATIC, check_dir=False), name="static")
    app.include_router(pages_router(uses, sessions))
    app.include_router(actions_router(uses.jobs, uses.nodes, sessions, auth, uses.holds))
    app.include_router(streams_router(uses.jobs, uses.logs, sessions, uses.limits))

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        """Never framed by another site; Swagger UI's inline script rules out the pages' CSP."""
        answer = get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} API",
            swagger_js_url=f"{VENDOR}/swagger-ui-bundle.js",
            swagger_css_url=f"{VENDOR}/swagger-ui.css",
            swagger_favicon_url=f"{VENDOR}/favicon-32x32.png",
        )
        answer.headers.update(NOT_FRAMED)
        return answer
