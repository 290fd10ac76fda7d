"""Conversions of reservations (domain/reservations.py) to and from the protobuf messages: a
request becomes the plain fields the domain checks (names or a count of each kind)."""

from __future__ import annotations

from typing import Any

from appliance._proto.v1 import cluster_pb2
from appliance.domain.errors import InvalidSpec
from appliance.domain.reservations import Reservation


def reservation_to_pb(r: Reservation, now: float) -> cluster_pb2.Reservation:
    return cluster_pb2.Reservation(
        name=r.name, start=r.start, end=r.end, nodes=list(r.nodes), maint=r.maint,
        users=list(r.users), groups=list(r.groups), queue=r.queue, creator=r.creator,
        created_at=r.created_at, state=r.state(now),
    )  # fmt: skip


def reservation_from_pb(msg: cluster_pb2.Reservation) -> Reservation:
    return Reservation(
        msg.name, msg.start, msg.end, tuple(msg.nodes), msg.maint, tuple(msg.users),
        tuple(msg.groups), msg.queue, msg.creator, msg.created_at,
    )  # fmt: skip


def request_fields(msg: cluster_pb2.CreateReservationRequest) -> dict[str, Any]:
    """The plain fields of a request (domain/reservations.py `check_request`)."""
    fields: dict[str, Any] = {
        "name": msg.name, "start": msg.start or None, "end": msg.end or None,
        "duration": msg.duration_seconds or None, "maint": msg.maint,
        "users": list(msg.users), "groups": list(msg.groups), "queue": msg.queue,
    }  # fmt: skip
    for field, names, count in (
        ("systems", msg.systems, msg.system_count),
        ("memoryx", msg.memoryx, msg.memoryx_count),
        ("swarmx", msg.swarmx, msg.swarmx_count),
    ):
        if names and count:  # proto3 cannot say "one of a list and a count": say it here
            raise InvalidSpec(f"give {field} as names or as a count, not both", field=field)
        fields[field] = list(names) if names else int(count)
    return fields


def request_to_pb(fields: dict[str, Any]) -> cluster_pb2.CreateReservationRequest:
    """The message of a request's plain fields (the client's side of `request_fields`)."""
    msg = cluster_pb2.CreateReservationRequest(
        name=fields["name"], start=fields.get("start") or 0.0, end=fields.get("end") or 0.0,
        duration_seconds=fields.get("duration") or 0.0, maint=bool(fields.get("maint")),
        users=list(fields.get("users") or ()), groups=list(fields.get("groups") or ()),
        queue=fields.get("queue") or "",
    )  # fmt: skip
    for field, count in (("systems", "system_count"), ("memoryx", "memoryx_count"),
                         ("swarmx", "swarmx_count")):  # fmt: skip
        value = fields.get(field)
        if isinstance(value, int):
            setattr(msg, count, value)
        elif value:
            getattr(msg, field).extend(value)
    return msg
