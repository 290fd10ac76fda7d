"""The audit log's messages (domain/audit.py) both ways: the gRPC door and the client."""

from __future__ import annotations

from appliance._proto.v1 import cluster_pb2
from appliance.domain.audit import (
    DEFAULT_PAGE,
    MAX_TOKEN,
    AuditEvent,
    AuditQuery,
    Door,
    Outcome,
)
from appliance.domain.errors import InvalidSpec


def query_to_pb(query: AuditQuery) -> cluster_pb2.ListAuditEventsRequest:
    return cluster_pb2.ListAuditEventsRequest(
        since=query.since, user=query.user, verb=query.verb, limit=query.limit,
        page_token=str(query.before_id) if query.before_id else "",
    )  # fmt: skip


def query_from_pb(request: cluster_pb2.ListAuditEventsRequest) -> AuditQuery:
    token = request.page_token
    if token and (len(token) > MAX_TOKEN or not token.isdigit()):
        raise InvalidSpec("page_token is not one this server gave", field="page_token")
    return AuditQuery(
        since=request.since, user=request.user, verb=request.verb,
        limit=request.limit or DEFAULT_PAGE, before_id=int(token or 0),
    ).checked()  # fmt: skip


def event_to_pb(e: AuditEvent) -> cluster_pb2.AuditEvent:
    return cluster_pb2.AuditEvent(
        id=e.id, at=e.at, request_id=e.request_id, user=e.user, groups=list(e.groups),
        admin=e.admin, source=e.source, door=e.door.value, verb=e.verb,
        object_kind=e.object_kind, object_name=e.object_name, outcome=e.outcome.value,
        reason=e.reason, body_sha256=e.body_sha256, body_bytes=e.body_bytes,
    )  # fmt: skip


def event_from_pb(m: cluster_pb2.AuditEvent) -> AuditEvent:
    return AuditEvent(
        id=m.id, at=m.at, request_id=m.request_id, user=m.user, groups=tuple(m.groups),
        admin=m.admin, source=m.source, door=Door(m.door), verb=m.verb,
        object_kind=m.object_kind, object_name=m.object_name, outcome=Outcome(m.outcome),
        reason=m.reason, body_sha256=m.body_sha256, body_bytes=m.body_bytes,
    )  # fmt: skip
