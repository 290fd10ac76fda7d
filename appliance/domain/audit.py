"""The audit log's records: who did or was refused what, through which door, and when (#36).

One `AuditEvent` per mutating call and per refusal at every door (reads that succeed leave
none). An event names its caller (user, groups, admin or not), where the call came from, the
verb and the object, the outcome and, for a refusal, its one line; never a token, never a
params body: at level Request the body's SHA-256 digest and size stand for it. Levels follow
Kubernetes' audit policy: None records nothing, Metadata the call without its body, Request
the call and its body's digest.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import re
from collections.abc import Sequence
from typing import Any

from appliance.domain.errors import InvalidSpec
from appliance.domain.timestamps import rfc3339

MAX_USER = 253
MAX_GROUPS = 32
MAX_SOURCE = 255
MAX_REQUEST_ID = 64
MAX_VERB = 64
MAX_OBJECT = 253
MAX_REASON = 512
DEFAULT_PAGE = 100
MAX_PAGE = 1000  # events one read returns at most
MAX_TOKEN = 18  # a page token's digits (an event's id, below 2**63)
# A request id a caller sends is kept only when it is this plain (else one is made).
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")


class AuditLevel(enum.StrEnum):
    NONE = "None"
    METADATA = "Metadata"
    REQUEST = "Request"


class Door(enum.StrEnum):
    GRPC = "grpc"
    REST = "rest"
    WEB = "web"
    CLI = "cli"


class Outcome(enum.StrEnum):
    ALLOWED = "allowed"
    REFUSED = "refused"  # the caller was told no: unauthenticated, denied, invalid, not found
    FAILED = "failed"  # the coordinator could not do it (internal, unavailable, cancelled)


# gRPC status codes that are a refusal of the caller (the others, but OK, are failures).
REFUSAL_CODES = frozenset({
    "INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
    "UNAUTHENTICATED", "UNIMPLEMENTED",
})  # fmt: skip


def outcome_of_code(code: str) -> Outcome:
    """The outcome of a gRPC call that ended with status `code` (its name)."""
    if code == "OK":
        return Outcome.ALLOWED
    return Outcome.REFUSED if code in REFUSAL_CODES else Outcome.FAILED


def outcome_of_status(status: int) -> Outcome:
    """The outcome of an HTTP request answered with `status`."""
    if status < 400:
        return Outcome.ALLOWED
    return Outcome.REFUSED if status < 500 else Outcome.FAILED


@dataclasses.dataclass(frozen=True)
class AuditEvent:
    """One record. `at` is Unix seconds (UTC); `body_bytes` is -1 when no body was taken (level
    Metadata); `id` is the store's, 0 until stored."""

    at: float
    request_id: str
    user: str
    groups: tuple[str, ...]
    admin: bool
    source: str
    door: Door
    verb: str
    object_kind: str
    object_name: str
    outcome: Outcome
    reason: str = ""
    body_sha256: str = ""
    body_bytes: int = -1
    id: int = 0

    def bounded(self, **changes: Any) -> AuditEvent:
        """This event with every text cut to its column's bound and made one printable line
        (and `changes` made, to fields it does not bound: one copy, not two)."""
        assert changes.keys() <= _UNBOUNDED, f"bounded() cannot change {set(changes)}"
        return dataclasses.replace(
            self,
            **changes,
            request_id=_line(self.request_id, MAX_REQUEST_ID),
            user=_line(self.user, MAX_USER),
            groups=tuple(_line(g, MAX_USER) for g in self.groups[:MAX_GROUPS]),
            source=_line(self.source, MAX_SOURCE),
            verb=_line(self.verb, MAX_VERB),
            object_kind=_line(self.object_kind, MAX_VERB),
            object_name=_line(self.object_name, MAX_OBJECT),
            reason=_line(self.reason, MAX_REASON),
        )

    @property
    def target(self) -> str:
        """kind/name as csctl writes it (the kind alone when there is no name)."""
        return f"{self.object_kind}/{self.object_name}" if self.object_name else self.object_kind

    def document(self) -> dict[str, object]:
        """The plain document of csctl's -o json|yaml, REST and the JSON-lines sink."""
        document: dict[str, object] = {"id": self.id} if self.id else {}
        document |= {
            "at": rfc3339(self.at), "request_id": self.request_id,
            "user": self.user, "groups": list(self.groups), "admin": self.admin,
            "source": self.source, "door": self.door.value, "verb": self.verb,
            "object": {"kind": self.object_kind, "name": self.object_name},
            "outcome": self.outcome.value, "reason": self.reason,
        }  # fmt: skip
        if self.body_bytes >= 0:
            document["body"] = {"sha256": self.body_sha256, "bytes": self.body_bytes}
        return document


_UNBOUNDED = frozenset({"at", "body_sha256", "body_bytes", "id"})


def _line(text: str, limit: int) -> str:
    """`text` as one printable line of at most `limit` characters."""
    if len(text) <= limit and text.isprintable():
        return text  # nearly every field: no copy, character by character
    flat = "".join(c if c.isprintable() else " " for c in text[: limit * 2])
    return flat[:limit]


def body_digest(body: bytes) -> tuple[str, int]:
    """What level Request keeps of a body: its SHA-256 (hex) and its size."""
    return hashlib.sha256(body).hexdigest(), len(body)


@dataclasses.dataclass(frozen=True)
class AuditQuery:
    """Which events to read, newest first: at or after `since` (Unix seconds; 0: any), of
    `user` and `verb` when given, at most `limit`, older than event `before_id` (a page's
    token; 0: from the newest)."""

    since: float = 0.0
    user: str = ""
    verb: str = ""
    limit: int = DEFAULT_PAGE
    before_id: int = 0

    def checked(self) -> AuditQuery:
        if not 0 < self.limit <= MAX_PAGE:
            raise InvalidSpec(f"limit must be between 1 and {MAX_PAGE}", field="limit")
        if len(self.user) > MAX_USER:
            raise InvalidSpec(f"user is longer than {MAX_USER} characters", field="user")
        if len(self.verb) > MAX_VERB:
            raise InvalidSpec(f"verb is longer than {MAX_VERB} characters", field="verb")
        if self.before_id < 0 or self.since < 0:
            raise InvalidSpec("since and page_token must not be negative", field="since")
        return self


def next_token(query: AuditQuery, events: Sequence[AuditEvent]) -> str:
    """The token of the page after `events` ("" when it was the last)."""
    return str(events[-1].id) if events and len(events) == query.limit else ""
