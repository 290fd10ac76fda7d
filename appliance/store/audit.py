"""The audit log in the store (domain/audit.py): appended in batches, read newest first,
pruned by age. Rows are never updated; retention is the only delete."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, insert, select

from appliance.domain.audit import AuditEvent, AuditQuery, Door, Outcome
from appliance.store.base import StoreBase
from appliance.store.tables import AuditEventRow

PRUNE_BATCH = 10_000  # rows one delete removes at most (a long backlog goes over passes)


class AuditStore(StoreBase):
    """JobStore's part for the audit log."""

    def append_audit_events(self, events: Sequence[AuditEvent]) -> None:
        """Store `events` in one transaction (their `id` is the store's, in order)."""
        if not events:
            return
        rows = [
            {
                "at": e.at, "request_id": e.request_id, "user": e.user,
                "groups": list(e.groups), "admin": e.admin, "source": e.source,
                "door": e.door.value, "verb": e.verb, "object_kind": e.object_kind,
                "object_name": e.object_name, "outcome": e.outcome.value, "reason": e.reason,
                "body_sha256": e.body_sha256, "body_bytes": e.body_bytes,
            }
            for e in events
        ]  # fmt: skip
        with self._sessions.begin() as s:
            s.execute(insert(AuditEventRow), rows)

    def audit_events(self, query: AuditQuery) -> list[AuditEvent]:
        """The events `query` selects, newest first."""
        stmt = select(AuditEventRow).order_by(AuditEventRow.id.desc()).limit(query.limit)
        if query.since:
            stmt = stmt.where(AuditEventRow.at >= query.since)
        if query.user:
            stmt = stmt.where(AuditEventRow.user == query.user)
        if query.verb:
            stmt = stmt.where(AuditEventRow.verb == query.verb)
        if query.before_id:
            stmt = stmt.where(AuditEventRow.id < query.before_id)
        with self._sessions() as s:
            return [_event(row) for row in s.scalars(stmt)]

    def prune_audit_events(self, before: float) -> int:
        """Delete up to PRUNE_BATCH of the events recorded before `before`; how many went."""
        oldest = (
            select(AuditEventRow.id)
            .where(AuditEventRow.at < before)
            .order_by(AuditEventRow.id)
            .limit(PRUNE_BATCH)
        )
        with self._sessions.begin() as s:
            ids = list(s.scalars(oldest))
            if ids:
                s.execute(delete(AuditEventRow).where(AuditEventRow.id <= ids[-1],
                                                      AuditEventRow.at < before))  # fmt: skip
        return len(ids)


def _event(row: AuditEventRow) -> AuditEvent:
    return AuditEvent(
        at=row.at, request_id=row.request_id, user=row.user, groups=tuple(row.groups),
        admin=row.admin, source=row.source, door=Door(row.door), verb=row.verb,
        object_kind=row.object_kind, object_name=row.object_name,
        outcome=Outcome(row.outcome), reason=row.reason, body_sha256=row.body_sha256,
        body_bytes=row.body_bytes, id=row.id,
    )  # fmt: skip
