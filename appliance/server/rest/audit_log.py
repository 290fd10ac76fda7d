"""/api/v1/audit: the audit log for admins (services/audit.py), newest first, a page at a time."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from appliance.domain.audit import (
    DEFAULT_PAGE,
    MAX_PAGE,
    MAX_TOKEN,
    MAX_USER,
    MAX_VERB,
    AuditEvent,
    AuditQuery,
    next_token,
)
from appliance.domain.auth import Principal
from appliance.domain.timestamps import utc_moment
from appliance.domain.usage import parse_when
from appliance.server.rest.auth import CallerDependency
from appliance.server.rest.errors import ERROR_RESPONSES
from appliance.server.rest.models import Moment
from appliance.services.audit import AuditTrail


class AuditObjectOut(BaseModel):
    kind: str = Field(description="job, jobs, node, queue, path; empty: none.")
    name: str


class AuditBodyOut(BaseModel):
    sha256: str
    bytes: int


class AuditEventOut(BaseModel):
    id: int
    at: Moment
    request_id: str
    user: str = Field(description="Empty: the caller was not authenticated.")
    groups: list[str]
    admin: bool
    source: str = Field(description="The caller's address.")
    door: str = Field(description="grpc, rest, web or cli.")
    verb: str
    object: AuditObjectOut
    outcome: str = Field(description="allowed, refused or failed.")
    reason: str = Field(description="A refusal's one line, its status first.")
    body: AuditBodyOut | None = Field(description="At level Request: the body's digest, size.")


class AuditListOut(BaseModel):
    events: list[AuditEventOut]
    next_page_token: str = Field(description="Pass as page_token for the next (older) page.")


def audit_router(trail: AuditTrail, caller: CallerDependency) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["audit"], responses=ERROR_RESPONSES)
    authenticated = Depends(caller)

    @router.get("/audit", response_model=AuditListOut)
    async def list_audit_events(
        since: Annotated[
            str, Query(max_length=40, description="30d, 12h, a date, Unix seconds; empty: all")
        ] = "",
        user: Annotated[str, Query(max_length=MAX_USER)] = "",
        verb: Annotated[str, Query(max_length=MAX_VERB)] = "",
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE,
        page_token: Annotated[str, Query(max_length=MAX_TOKEN, pattern="^[0-9]*$")] = "",
        by: Principal | None = authenticated,
    ) -> AuditListOut:
        """Admins: the audit log, newest first: every mutating call and every refusal."""
        start = parse_when(since, time.time(), "since") if since else 0.0
        query = AuditQuery(start, user, verb, limit, int(page_token or 0))
        events = await trail.list(query, by)
        return AuditListOut(
            events=[_out(e) for e in events], next_page_token=next_token(query, events)
        )

    return router


def _out(e: AuditEvent) -> AuditEventOut:
    body = AuditBodyOut(sha256=e.body_sha256, bytes=e.body_bytes) if e.body_bytes >= 0 else None
    return AuditEventOut(
        id=e.id, at=utc_moment(e.at), request_id=e.request_id, user=e.user,
        groups=list(e.groups), admin=e.admin, source=e.source, door=e.door.value, verb=e.verb,
        object=AuditObjectOut(kind=e.object_kind, name=e.object_name),
        outcome=e.outcome.value, reason=e.reason, body=body,
    )  # fmt: skip
