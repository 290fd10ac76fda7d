"""A user's per-user limits on the wire (GetLimits), both ways."""

from __future__ import annotations

from appliance._proto.v1 import cluster_pb2
from appliance.domain.limits import Caps, LimitsReport


def limits_to_pb(report: LimitsReport) -> cluster_pb2.Limits:
    caps = report.caps
    pb_caps = cluster_pb2.LimitCaps(burst=caps.burst)
    if caps.streams is not None:
        pb_caps.streams = caps.streams
    if caps.requests_per_second is not None:
        pb_caps.requests_per_second = caps.requests_per_second
    if caps.queued_jobs is not None:
        pb_caps.queued_jobs = caps.queued_jobs
    if caps.running_systems is not None:
        pb_caps.running_systems = caps.running_systems
    return cluster_pb2.Limits(
        user=report.user,
        enabled=report.enabled,
        caps=pb_caps,
        streams_open=report.streams_open,
        requests_left=report.tokens_left,
        queued_by_queue=dict(report.waiting),
        queue_caps=dict(report.queue_caps),
        running_systems=report.running_systems,
    )


def limits_from_pb(msg: cluster_pb2.Limits) -> LimitsReport:
    c = msg.caps
    caps = Caps(
        streams=c.streams if c.HasField("streams") else None,
        requests_per_second=c.requests_per_second if c.HasField("requests_per_second") else None,
        burst=c.burst,
        queued_jobs=c.queued_jobs if c.HasField("queued_jobs") else None,
        running_systems=c.running_systems if c.HasField("running_systems") else None,
    )
    return LimitsReport(
        user=msg.user,
        enabled=msg.enabled,
        caps=caps,
        streams_open=msg.streams_open,
        tokens_left=msg.requests_left,
        waiting=dict(msg.queued_by_queue),
        queue_caps=dict(msg.queue_caps),
        running_systems=msg.running_systems,
    )
