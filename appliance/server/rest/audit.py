"""The HTTP doors' part of the audit log (services/audit.py): REST and the dashboard's actions.

A pure ASGI middleware, just outside the request guard (so its 401 and 413 are seen): one
record per request that may change something (POST, PUT, PATCH, DELETE) and per request
refused (a 4xx, or a dashboard action refused with a redirect to the login), reads
included; a read that succeeds leaves none. The verb is the route's (a table for those that
change something, else its name: get-job, list-jobs); the object the job, node or queue the
path names, or the job a submit made. Who: the bearer token's caller (REST), or the
dashboard's session as its route found it (`request.state.shared`). A route may name its
verb more exactly (`name_verb`), and a dashboard route says why it refused (`refused`).

Never the token nor the body: at level Request, the body's SHA-256 and size (none for the
login form, which carries a token). Each response carries its request id (X-Request-Id).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from appliance.domain.audit import AuditEvent, Door, Outcome, outcome_of_status
from appliance.domain.auth import ANONYMOUS_USER, Principal
from appliance.domain.errors import Unauthenticated
from appliance.server.auth import Authenticator
from appliance.services.audit import AuditTrail, request_id

REQUEST_ID_HEADER = b"x-request-id"
_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_ERROR_BYTES = 4096  # of an error's body read for its message
# Routes (by endpoint name) that change something: their verb. A lease's heartbeat renews
# what the submit recorded: recorded only when refused.
VERBS = {
    "submit_job": "submit", "cancel_job": "cancel", "cancel_jobs": "cancel-many",
    "patch_job": "update", "set_node_state": "set-node-state", "set_queue": "set-queue",
    "delete_queue": "delete-queue", "cancel": "cancel", "set_priority": "set-priority",
    "label": "label", "log_in": "login", "log_out": "logout", "hold_job": "hold",
    "release_job": "release", "suspend_job": "suspend", "resume_job": "resume",
    "hold": "hold", "release": "release", "create_reservation": "create-reservation",
    "delete_reservation": "delete-reservation",
}  # fmt: skip
QUIET = frozenset({"heartbeat"})
_KINDS = {"job_id": "job", "nodes": "node", "queues": "queue", "reservations": "reservation"}


def name_verb(request: Request, verb: str) -> None:
    """Say the verb of this request more exactly than its route does (node-drain)."""
    request.state.audit_verb = verb


def refused(request: Request, message: str) -> None:
    """Say that this request is refused, and why, when its status does not (a redirect)."""
    request.state.audit_refused = message


class AuditRequests:
    def __init__(
        self,
        app: ASGIApp,
        trail: AuditTrail,
        auth: Authenticator,
        cookie_paths: tuple[str, ...] = (),
    ) -> None:
        self.app = app
        self.trail = trail
        self.auth = auth
        self.cookie_paths = cookie_paths  # the dashboard's: its own door

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.trail.on:
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        rid = request_id(headers.get(REQUEST_ID_HEADER, b"").decode("latin-1"))
        rid_bytes = rid.encode("latin-1")
        seen = _Seen(self.trail.wants_body and not scope["path"].endswith("/login"))

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen.started(message)
                message["headers"] = [*message.get("headers", ()), (REQUEST_ID_HEADER, rid_bytes)]
            elif message["type"] == "http.response.body" and seen.status >= 400:
                seen.error_body(message.get("body", b""))
            await send(message)

        async def receiving() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                seen.body(message.get("body", b""))
            return message

        try:
            await self.app(scope, receiving, sending)
        except BaseException:
            seen.status = seen.status or 500
            self._record(scope, headers, rid, seen)
            raise
        self._record(scope, headers, rid, seen)

    def _record(self, scope: Scope, headers: dict[bytes, bytes], rid: str, seen: _Seen) -> None:
        state: dict[str, Any] = scope.get("state") or {}
        route = scope.get("route")
        endpoint = getattr(route, "name", "") or ""
        outcome = outcome_of_status(seen.status)
        reason = seen.reason()
        if "audit_refused" in state:
            outcome, reason = Outcome.REFUSED, f"{seen.status}: {state['audit_refused']}"
        changing = scope["method"] in _CHANGING and endpoint not in QUIET
        if outcome is not Outcome.REFUSED and not changing:
            return
        web = scope["path"].startswith(self.cookie_paths) if self.cookie_paths else False
        who = self._who(state, headers, web)
        verb = state.get("audit_verb") or VERBS.get(endpoint) or _kebab(endpoint, scope)
        location = seen.location if endpoint == "submit_job" else ""
        kind, name = _object(scope, location) if route else ("path", scope["path"])
        client = scope.get("client")
        event = AuditEvent(
            at=0.0, request_id=rid, user=who.user if who else "",
            groups=who.groups if who else (), admin=who.admin if who else False,
            source=f"{client[0]}:{client[1]}" if client else "",
            door=Door.WEB if web else Door.REST, verb=verb, object_kind=kind,
            object_name=name, outcome=outcome,
            reason="" if outcome is Outcome.ALLOWED else reason,
            body_sha256=seen.digest(), body_bytes=seen.size,
        )  # fmt: skip
        self.trail.record(event)

    def _who(
        self, state: dict[str, Any], headers: dict[bytes, bytes], web: bool
    ) -> Principal | None:
        if web:
            shared = state.get("shared") or {}
            who = shared.get("who")
            if who is None and not self.auth.enabled:
                return Principal(user=ANONYMOUS_USER, admin=True)
            return who if isinstance(who, Principal) else None
        authorization = headers.get(b"authorization", b"").decode("latin-1")
        if not self.auth.enabled:
            return Principal(user=ANONYMOUS_USER, admin=True)
        try:
            return self.auth.principal(authorization or None)
        except Unauthenticated:
            return None


class _Seen:
    """What the middleware saw of one request: the body's digest and size (when kept), the
    status, a submit's Location, an error's first bytes."""

    def __init__(self, digesting: bool) -> None:
        self._hash = hashlib.sha256() if digesting else None
        self.size = 0 if digesting else -1
        self.status = 0
        self.location = ""
        self._error = b""

    def body(self, chunk: bytes) -> None:
        if self._hash is not None:
            self._hash.update(chunk)
            self.size += len(chunk)

    def digest(self) -> str:
        return self._hash.hexdigest() if self._hash is not None else ""

    def started(self, message: Message) -> None:
        self.status = int(message["status"])
        for key, value in message.get("headers", ()):
            if key.lower() == b"location":
                self.location = value.decode("latin-1")

    def error_body(self, chunk: bytes) -> None:
        if len(self._error) < _ERROR_BYTES:
            self._error += chunk[: _ERROR_BYTES - len(self._error)]

    def reason(self) -> str:
        """`status: message` (the error body's message when it is the API's JSON)."""
        try:
            message = str(json.loads(self._error)["error"]["message"])
        except (ValueError, KeyError, TypeError):
            message = ""
        return f"{self.status}: {message}" if message else str(self.status)


def _object(scope: Scope, location: str) -> tuple[str, str]:
    """(kind, name) of what the path names: a job, node or queue; a submit's new job."""
    params: dict[str, Any] = scope.get("path_params") or {}
    if "job_id" in params:
        return "job", str(params["job_id"])
    if "name" in params:
        parts = scope["path"].split("/")
        kind = next((_KINDS[p] for p in parts if p in _KINDS), "object")
        return kind, str(params["name"])
    if location:
        return "job", location.rstrip("/").rsplit("/", 1)[-1]
    return "", ""


def _kebab(endpoint: str, scope: Scope) -> str:
    """get_job -> get-job; a path no route serves: the method and the path."""
    if endpoint:
        return endpoint.replace("_", "-")
    return str(scope["method"]).lower()
