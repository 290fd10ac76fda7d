"""Conversions of queues and usage reports between the domain and the protobuf messages."""

from __future__ import annotations

import dataclasses

from appliance._proto.v1 import cluster_pb2
from appliance.domain.queues import USER_CAPS, QueueSpec, QueueStatus, Quota, Source
from appliance.domain.usage import UsageBy, UsageQuery, UsageRow


def queue_to_pb(status: QueueStatus) -> cluster_pb2.Queue:
    spec, quota = status.spec, status.quota
    return cluster_pb2.Queue(
        name=spec.name, quota_systems=quota.systems, quota_memoryx_bytes=quota.memoryx_bytes,
        weight=spec.weight, borrow_systems=spec.borrow_systems,
        borrow_memoryx_bytes=spec.borrow_memoryx_bytes, lend=spec.lend, groups=list(spec.groups),
        source=spec.source.value, updated_by=spec.updated_by, updated_at=spec.updated_at,
        used_systems=status.used_systems, used_memoryx_bytes=status.used_memoryx_bytes,
        borrowed_systems=status.borrowed_systems, lent_systems=status.lent_systems,
        pending=status.pending, running=status.running, share=status.share,
        weighted_share=status.weighted_share, systems=spec.systems,
        memoryx_bytes=spec.memoryx_bytes, **{cap: getattr(spec, cap) for cap in USER_CAPS},
        default_time_limit=spec.default_time_limit, max_time_limit=spec.max_time_limit,
    )  # fmt: skip


def queue_from_pb(msg: cluster_pb2.Queue) -> QueueStatus:
    def optional(field: str) -> int | None:
        return int(getattr(msg, field)) if msg.HasField(field) else None  # type: ignore[arg-type]

    spec = QueueSpec(
        name=msg.name, systems=optional("systems"), memoryx_bytes=optional("memoryx_bytes"),
        weight=msg.weight, borrow_systems=optional("borrow_systems"),
        borrow_memoryx_bytes=optional("borrow_memoryx_bytes"), lend=msg.lend,
        groups=tuple(msg.groups), source=_source(msg.source), updated_by=msg.updated_by,
        updated_at=msg.updated_at, **{cap: optional(cap) for cap in USER_CAPS},
        default_time_limit=optional("default_time_limit"),
        max_time_limit=optional("max_time_limit"),
    )  # fmt: skip
    quota = Quota(
        msg.quota_systems, msg.quota_memoryx_bytes, spec.borrow_systems,
        spec.borrow_memoryx_bytes, spec.lend, spec.weight,
    )  # fmt: skip
    return QueueStatus(
        spec=spec, quota=quota, used_systems=msg.used_systems,
        used_memoryx_bytes=msg.used_memoryx_bytes, borrowed_systems=msg.borrowed_systems,
        lent_systems=msg.lent_systems, pending=msg.pending, running=msg.running,
        share=msg.share, weighted_share=msg.weighted_share,
    )  # fmt: skip


def _source(text: str) -> Source:
    try:
        return Source(text)
    except ValueError:
        return Source.ADMIN


def usage_to_pb(query: UsageQuery, rows: list[UsageRow]) -> cluster_pb2.UsageReport:
    return cluster_pb2.UsageReport(
        since=query.since,
        until=query.until,
        by=query.by.value,
        rows=[cluster_pb2.UsageRow(**dataclasses.asdict(row)) for row in rows],
    )


def usage_from_pb(msg: cluster_pb2.UsageReport) -> tuple[UsageQuery, list[UsageRow]]:
    fields = [f.name for f in dataclasses.fields(UsageRow)]
    rows = [UsageRow(**{name: getattr(r, name) for name in fields}) for r in msg.rows]
    by = UsageBy(msg.by) if msg.by in {b.value for b in UsageBy} else UsageBy.USER
    return UsageQuery(msg.since, msg.until, by), rows
