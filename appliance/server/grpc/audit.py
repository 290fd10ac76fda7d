"""The gRPC door's part of the audit log (services/audit.py): one record per mutating call
(allowed, refused or failed) and per refused call of any method, reads included; reads that
succeed leave none, nor do the replicas' own calls unless refused.

It wraps the Authentication interceptor (server/app.py lists it just before), so it sees the
refusals of authentication and reads who called once the call ends. A record is queued, never
written on the call's path. It names the caller and the object, never the token nor the
request's body (at level Request: the body's SHA-256 and size). A refusal by a per-user
limit (server/grpc/limiting.py says which) is recorded coalesced: the first of a second in
full, then a count (services/audit.py `record_limited`).
"""

from __future__ import annotations

import re
from typing import Any

import grpc

from appliance.domain.audit import AuditEvent, Door, Outcome, body_digest, outcome_of_code
from appliance.domain.auth import ANONYMOUS_USER
from appliance.domain.inventory import NodeState
from appliance.server.grpc.authn import CLUSTER, PUBLIC, known_caller
from appliance.server.grpc.errors import Ctx
from appliance.server.grpc.limiting import refused_by
from appliance.server.grpc.metrics import call_code
from appliance.server.grpc.wrapping import HandlerWrapping, observed
from appliance.services.audit import AuditTrail, request_id

REQUEST_ID_KEY = "x-request-id"
_STATES = frozenset(s.value for s in NodeState)

# ClusterService's methods that change something: (verb, kind of object). A lease's heartbeat
# renews what the submit recorded; it is recorded only when refused, like a read.
MUTATING: dict[str, tuple[str, str]] = {
    "SubmitJob": ("submit", "job"),
    "CancelJob": ("cancel", "job"),
    "CancelJobs": ("cancel-many", "jobs"),
    "SetJobPriority": ("set-priority", "job"),
    "UpdateJobLabels": ("label", "job"),
    "SetNodeState": ("set-node-state", "node"),
    "SetQueue": ("set-queue", "queue"),
    "DeleteQueue": ("delete-queue", "queue"),
    "HoldJob": ("hold", "job"),
    "ReleaseJob": ("release", "job"),
    "SuspendJob": ("suspend", "job"),
    "ResumeJob": ("resume", "job"),
    "CreateReservation": ("create-reservation", "reservation"),
    "DeleteReservation": ("delete-reservation", "reservation"),
}
# The kind of object a read's `name` names (its `job_id` names a job).
_NAMED = {"GetNodeEvents": "node"}


class AuditCalls(HandlerWrapping):
    """`auth_on`: whether calls are authenticated (else a caller is whom it names)."""

    def __init__(self, trail: AuditTrail, auth_on: bool) -> None:
        super().__init__()
        self._trail = trail
        self._auth_on = auth_on

    def wraps(self, method: str) -> bool:
        return self._trail.on and method not in PUBLIC

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        service, _, name = method.lstrip("/").partition("/")
        mutating = MUTATING.get(name) if service == CLUSTER else None
        verb, kind = mutating or (_kebab(name), _NAMED.get(name, ""))

        def ended(
            _: None, request: Any, context: Ctx, failure: BaseException | None, response: Any
        ) -> None:
            code = call_code(context, failure)
            outcome = outcome_of_code(code)
            if mutating is None and outcome is not Outcome.REFUSED:
                return  # a read that succeeded (or failed on our side): not a record
            self._record(name, verb, kind, request, context, code, outcome, response)

        return observed(handler, lambda: None, ended)

    def _record(
        self,
        method: str,
        verb: str,
        kind: str,
        request: Any,
        context: Ctx,
        code: str,
        outcome: Outcome,
        response: Any,
    ) -> None:
        metadata = dict(context.invocation_metadata() or ())
        principal = known_caller()
        if principal is not None:
            user, groups, admin = principal.user, principal.groups, principal.admin
        elif self._auth_on:  # refused before it was known who called
            user, groups, admin = "", (), False
        else:
            user, groups, admin = getattr(request, "user", "") or ANONYMOUS_USER, (), True
        verb, kind, name = _object(method, verb, kind, request, response)
        digest, size = "", -1
        if self._trail.wants_body and hasattr(request, "SerializeToString"):
            digest, size = body_digest(request.SerializeToString())
        reason = "" if outcome is Outcome.ALLOWED else f"{code}: {context.details() or ''}"
        limit = refused_by() if code == "RESOURCE_EXHAUSTED" else ""
        if limit:
            reason = f"{reason} [limit {limit}]"
        event = AuditEvent(
            at=0.0, request_id=request_id(metadata.get(REQUEST_ID_KEY)), user=user,
            groups=tuple(groups), admin=admin, source=context.peer() or "", door=Door.GRPC,
            verb=verb, object_kind=kind, object_name=name, outcome=outcome,
            reason=reason.rstrip(": "), body_sha256=digest, body_bytes=size,
        )  # fmt: skip
        if limit:
            self._trail.record_limited(event, limit)
        else:
            self._trail.record(event)


def _object(
    method: str, verb: str, kind: str, request: Any, response: Any
) -> tuple[str, str, str]:
    """(verb, kind, name) of what the call acted on: a new job's id once submitted; a node's
    state change is its own verb (node-drain, node-ok, ...)."""
    if method == "SubmitJob":
        return verb, kind, getattr(response, "id", "")
    if method == "SetNodeState":
        state = str(request.state)
        return (f"node-{state}" if state in _STATES else verb), kind, str(request.name)
    job_id = getattr(request, "job_id", "")
    if job_id:
        return verb, "job", str(job_id)
    name = getattr(request, "name", "")
    return verb, kind or ("object" if name else ""), str(name)


def _kebab(name: str) -> str:
    """GetJobLogs -> get-job-logs."""
    return re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()
