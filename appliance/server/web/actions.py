"""The dashboard's actions: cancel, set priority, hold and release, label, a node's state
(admins), and the login. Each is a POSTed form, checked for CSRF, then the same use case (and
rules) as REST."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from appliance.domain.errors import InvalidSpec, Unauthenticated
from appliance.domain.inventory import NodeState
from appliance.domain.spec import MAX_REASON, Priority
from appliance.server.auth import Authenticator
from appliance.server.rest.audit import name_verb
from appliance.server.web.fields import labels, one_of
from appliance.server.web.render import LOGIN, PREFIX, HtmlRoute, page
from appliance.server.web.session import Sessions
from appliance.services.holds import HoldService
from appliance.services.jobs import JobService
from appliance.services.nodes import MAX_NODE_NAME, NodeService

JobId = Annotated[str, Path(max_length=64)]
NodeName = Annotated[str, Path(max_length=MAX_NODE_NAME)]
MAX_TOKEN = 512


def actions_router(
    jobs: JobService,
    nodes: NodeService,
    sessions: Sessions,
    auth: Authenticator,
    holds: HoldService,
) -> APIRouter:
    router = APIRouter(prefix=PREFIX, route_class=HtmlRoute, include_in_schema=False)

    def back_to(job_id: str) -> RedirectResponse:
        return RedirectResponse(f"{PREFIX}/jobs/{job_id}", 303)

    @router.post("/jobs/{job_id}/cancel")
    async def cancel(request: Request, job_id: JobId) -> Response:
        by, form = await sessions.act(request)
        await jobs.cancel(job_id, form.get("reason", ""), by=by)
        return back_to(job_id)

    @router.post("/jobs/{job_id}/priority")
    async def set_priority(request: Request, job_id: JobId) -> Response:
        by, form = await sessions.act(request)
        name = one_of(form.get("priority", ""), Priority.__members__, "priority")
        await jobs.set_priority(job_id, Priority[name], by=by)
        return back_to(job_id)

    @router.post("/jobs/{job_id}/hold")
    async def hold(request: Request, job_id: JobId) -> Response:
        by, _ = await sessions.act(request)
        await holds.hold(job_id, by=by)
        return back_to(job_id)

    @router.post("/jobs/{job_id}/release")
    async def release(request: Request, job_id: JobId) -> Response:
        by, _ = await sessions.act(request)
        await holds.release(job_id, by=by)
        return back_to(job_id)

    @router.post("/jobs/{job_id}/labels")
    async def label(request: Request, job_id: JobId) -> Response:
        """`set`: k=v,k2=v2 to add or change; `remove`: keys, comma-separated."""
        by, form = await sessions.act(request)
        wanted = labels(form.get("set", ""), "set")
        remove = [k.strip() for k in form.get("remove", "").split(",") if k.strip()]
        if not wanted and not remove:
            raise InvalidSpec("give labels to set (k=v) or keys to remove", field="set")
        await jobs.update_labels(job_id, wanted, remove, by=by)
        return back_to(job_id)

    @router.post("/nodes/{name}/state")
    async def set_node_state(request: Request, name: NodeName) -> Response:
        by, form = await sessions.act(request)
        wanted = one_of(form.get("state", ""), [s.value for s in NodeState], "state")
        name_verb(request, f"node-{wanted}")
        reason = form.get("reason", "")
        if len(reason) > MAX_REASON:
            raise InvalidSpec(f"reason is longer than {MAX_REASON} characters", field="reason")
        await nodes.set_state(name, NodeState(wanted), reason, by=by)
        return RedirectResponse(f"{PREFIX}/cluster", 303)

    @router.get("/login", response_class=HTMLResponse)
    async def login_form(request: Request) -> Response:
        """The form; with authentication off, a page saying there is nothing to log in to."""
        sessions.share(request, None)
        return page(request, "login.html", {"title": "Log in", "auth_on": auth.enabled})

    @router.post("/login")
    async def log_in(request: Request) -> Response:
        """Check the token, then open a session for it (its id is the cookie); the token is
        never echoed or logged. With authentication off there is no session to open: back to
        the dashboard, no cookie set."""
        if not auth.enabled:
            return RedirectResponse("/", 303)
        sessions.share(request, None)
        form = await sessions.form(request)
        token = form.get("token", "").strip()
        if not token or len(token) > MAX_TOKEN:
            raise InvalidSpec("paste the token `appliance token create` gave you", field="token")
        try:
            sessions.share(request, auth.principal(f"Bearer {token}"))  # who, for the audit log
        except Unauthenticated as exc:
            context = {"title": "Log in", "auth_on": auth.enabled, "refused": exc.message}
            return page(request, "login.html", context, 401)
        answer = RedirectResponse("/", 303)
        sessions.log_in(answer, request, token)
        return answer

    @router.post("/logout")
    async def log_out(request: Request) -> Response:
        await sessions.form(request)
        answer = RedirectResponse(LOGIN, 303)
        sessions.log_out(answer, request)
        return answer

    return router
