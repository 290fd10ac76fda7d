"""Reservations (as Slurm's `scontrol create reservation`): nodes booked for a window
[start, end), either for maintenance (`maint`: no job may run into it) or for named users,
groups or a queue (only their jobs may use the nodes then, and their jobs use them first).

A request names its nodes or counts them (systems, MemoryX, SwarmX); a count is turned into
names at creation: nodes of that kind free of other reservations in the window, in name
order. Every field is bounded before it is parsed and refused with one sentence naming it.
Refused: a window ending in the past, a start in the past (but for START_SLACK_SECONDS, taken
as now), start not before end, a window over MAX_WINDOW_SECONDS,
unknown nodes, a count over what is free, a maintenance window on a node whose running job
would run into it by its time limit, a window overlapping a maintenance reservation on
the same nodes (and a maintenance one overlapping any reservation on its nodes), a name in
use. A reservation that has ended is dropped: it is not listed and blocks nothing (its name
may be used again).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from appliance.domain.errors import Conflict, InsufficientCapacity, InvalidSpec
from appliance.domain.inventory import Node, NodeKind
from appliance.domain.queues import validate_queue_name

MAX_NAME_CHARS = 63
MAX_WINDOW_SECONDS = 366 * 86400  # a year (a leap one included)
MAX_NAMES = 64  # users or groups one reservation lists
MAX_NODES = 4096  # nodes one reservation names or counts
MAX_RESERVATIONS = 1000  # reservations not yet ended, in all
# A start up to this far in the past is taken as now (the caller's clock may lag, or `now+1`
# was computed a moment ago); one further back is refused (as Slurm's MAX_RESV_DELAY).
START_SLACK_SECONDS = 600
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_PRINCIPAL_RE = re.compile(r"^[A-Za-z0-9_.@-]{1,253}$")
# The request's fields of nodes by kind: names, or a count.
NODE_FIELDS = {
    NodeKind.SYSTEM: "systems",
    NodeKind.MEMORYX: "memoryx",
    NodeKind.SWARMX: "swarmx",
}
MAINT = "maint"


@dataclasses.dataclass(frozen=True)
class Reservation:
    """Nodes booked for [start, end) (Unix seconds): for maintenance, or for the jobs of its
    users, groups or queue."""

    name: str
    start: float
    end: float
    nodes: tuple[str, ...]
    maint: bool = False
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    queue: str = ""
    creator: str = ""
    created_at: float = 0.0

    def overlaps(self, start: float, end: float) -> bool:
        """Whether [start, end) meets its window."""
        return self.start < end and start < self.end

    def admits(self, user: str, groups: Iterable[str], queue: str) -> bool:
        """Whether a job of `user` (in `groups`) in `queue` may use its nodes (never, for
        maintenance)."""
        if self.maint:
            return False
        return (
            user in self.users
            or not set(groups).isdisjoint(self.groups)
            or (bool(self.queue) and queue == self.queue)
        )

    def active(self, now: float) -> bool:
        return self.start <= now < self.end

    def state(self, now: float) -> str:
        """ACTIVE within its window, INACTIVE before it (Slurm's words)."""
        return "ACTIVE" if self.active(now) else "INACTIVE"

    @property
    def audience(self) -> str:
        """Whom it is for as csctl and the dashboard show it: `maint`, or its users, groups
        (`@g`) and queue (`queue=q`)."""
        if self.maint:
            return MAINT
        queue = [f"queue={self.queue}"] if self.queue else []
        return ",".join([*self.users, *(f"@{g}" for g in self.groups), *queue])


@dataclasses.dataclass(frozen=True)
class ReservationRequest:
    """A checked request: the window, the nodes by name or count per kind, who it is for."""

    name: str
    start: float
    end: float
    names: Mapping[NodeKind, tuple[str, ...]]
    counts: Mapping[NodeKind, int]
    maint: bool
    users: tuple[str, ...]
    groups: tuple[str, ...]
    queue: str


def check_request(fields: Mapping[str, Any], now: float) -> ReservationRequest:
    """Check every field of a request (plain values, as REST's JSON or gRPC's message give
    them): `name`; `start` (Unix seconds; 0 or absent: now); `end` or `duration` (seconds);
    `systems`, `memoryx`, `swarmx` (a list of names, or a count); `maint`; `users`, `groups`,
    `queue`. InvalidSpec naming the field of the first bad value."""
    name = check_name(fields.get("name"))
    start = _seconds(fields.get("start"), "start") or now
    duration = _seconds(fields.get("duration"), "duration")
    end = _seconds(fields.get("end"), "end")
    if end and duration:
        raise InvalidSpec("give end or duration, not both", field="duration")
    if not end and not duration:
        raise InvalidSpec("end or duration is required", field="end")
    if end and end <= now:
        raise InvalidSpec("end is in the past: a reservation must end after now", field="end")
    if start < now - START_SLACK_SECONDS:
        raise InvalidSpec("start is in the past: give now or a later time", field="start")
    start = max(start, now)
    end = end or start + duration
    if start >= end:
        raise InvalidSpec("start must be before end", field="start")
    if end - start > MAX_WINDOW_SECONDS:
        raise InvalidSpec(f"the window is over {MAX_WINDOW_SECONDS // 86400} days", field="end")
    names: dict[NodeKind, tuple[str, ...]] = {}
    counts: dict[NodeKind, int] = {}
    for kind, field in NODE_FIELDS.items():
        value = fields.get(field)
        if isinstance(value, int) and not isinstance(value, bool):
            if not 0 <= value <= MAX_NODES:
                raise InvalidSpec(f"{field} must be a count from 0 to {MAX_NODES}", field=field)
            if value:
                counts[kind] = value
        elif value:
            names[kind] = _names(value, field, MAX_NODES, re.compile(r"^[A-Za-z0-9_.-]{1,253}$"))
    if not names.get(NodeKind.SYSTEM) and not counts.get(NodeKind.SYSTEM):
        raise InvalidSpec(
            "systems is required: names of CS-2 systems, or a count of at least 1",
            field="systems",
        )
    maint = fields.get("maint", False)
    if not isinstance(maint, bool):
        raise InvalidSpec("maint must be true or false", field="maint")
    users = _names(fields.get("users") or [], "users", MAX_NAMES, _PRINCIPAL_RE)
    groups = _names(fields.get("groups") or [], "groups", MAX_NAMES, _PRINCIPAL_RE)
    queue = fields.get("queue") or ""
    if queue:
        try:
            queue = validate_queue_name(queue)
        except InvalidSpec as exc:
            raise InvalidSpec(exc.message, field="queue") from None
    if maint and (users or groups or queue):
        given = "users" if users else "groups" if groups else "queue"
        raise InvalidSpec(
            f"a maintenance reservation is for nobody: give no {given} with maint", field=given
        )
    if not maint and not (users or groups or queue):
        raise InvalidSpec(
            "say whom it is for (users, groups or queue), or make it maint", field="users"
        )
    return ReservationRequest(name, start, end, names, counts, maint, users, groups, queue)


def check_name(name: Any) -> str:
    """A reservation's name, checked (InvalidSpec naming `name`)."""
    if not isinstance(name, str) or len(name) > MAX_NAME_CHARS or not _NAME_RE.match(name):
        raise InvalidSpec(
            f"name must be 1-{MAX_NAME_CHARS} lowercase letters, digits or '-', "
            f"got {repr(name)[:40]}",
            field="name",
        )
    return name


def _seconds(value: Any, field: str) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidSpec(f"{field} must be a number of seconds", field=field)
    if not 0 <= value < 1 << 40:
        raise InvalidSpec(f"{field} must be from 0 to {1 << 40} seconds", field=field)
    return float(value)


def _names(value: Any, field: str, most: int, pattern: re.Pattern[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple) or len(value) > most:
        raise InvalidSpec(f"{field} must be a list of at most {most} names", field=field)
    for item in value:
        if not isinstance(item, str) or not pattern.match(item):
            raise InvalidSpec(f"{field}: {repr(item)[:40]} is not a valid name", field=field)
    return tuple(dict.fromkeys(value))


def book(
    request: ReservationRequest,
    pool: Sequence[Node],
    existing: Sequence[Reservation],
    by: str,
    now: float,
    busy_until: Mapping[str, float] | None = None,
) -> Reservation:
    """The reservation `request` makes on `pool`, beside the `existing` ones (those ended are
    ignored): counts turned into names of nodes free of other reservations in the window,
    those whose running job ends by its time limit before the window first (`busy_until`:
    node -> that end, inf for a job with none; a booking does not stop a running job). A
    maintenance one takes no node whose running job would run into it (Conflict for a name).
    InvalidSpec for an unknown node, InsufficientCapacity for a count over what is free,
    Conflict for a name in use or an overlap with (or of) a maintenance reservation."""
    current = [r for r in existing if r.end > now]
    if any(r.name == request.name for r in current):
        raise Conflict(f"a reservation named {request.name} exists", field="name")
    if len(current) >= MAX_RESERVATIONS:
        raise InsufficientCapacity(
            f"there are {MAX_RESERVATIONS} reservations; delete one first", field="name"
        )
    kinds = {n.name: n.kind for n in pool}
    overlapping = [r for r in current if r.overlaps(request.start, request.end)]
    booked = {node for r in overlapping for node in r.nodes}
    nodes: list[str] = []
    ends = busy_until or {}

    def runs_into(node: str) -> bool:  # its running job's limit reaches the window
        return ends.get(node, -math.inf) > request.start

    for kind, field in NODE_FIELDS.items():
        for node in request.names.get(kind, ()):
            if kinds.get(node) is not kind:
                what = "no such node" if node not in kinds else f"not a {field} node"
                raise InvalidSpec(f"{field}: {node}: {what}", field=field)
            if request.maint and runs_into(node):  # as Slurm's "Requested nodes are busy"
                raise Conflict(
                    f"{field}: {node} runs a job whose time limit (or lack of one) reaches "
                    "the window: start it after that job ends, or requeue the job first",
                    field=field,
                )
            nodes.append(node)
        count = request.counts.get(kind, 0)
        if count:
            free = [
                n.name for n in pool
                if n.kind is kind and n.name not in booked and n.name not in nodes
                and not (request.maint and runs_into(n.name))
            ]  # fmt: skip
            free.sort(key=runs_into)  # stable: in name order within each of the two
            if count > len(free):
                raise InsufficientCapacity(
                    f"{field}: {count} asked, {len(free)} free of other reservations "
                    + ("and of jobs running into it " if request.maint else "")
                    + "in that window",
                    field=field,
                )
            nodes += free[:count]
    for other in overlapping:
        shared = set(other.nodes).intersection(nodes)
        if shared and (other.maint or request.maint):
            which = "the maintenance reservation" if other.maint else "the reservation"
            raise Conflict(
                f"the window overlaps {which} {other.name} on {sorted(shared)[0]}",
                field="start",
            )
    return Reservation(
        request.name, request.start, request.end, tuple(nodes), request.maint,
        request.users, request.groups, request.queue, by, now,
    )  # fmt: skip


def holding(reservations: Iterable[Reservation], now: float) -> dict[str, Reservation]:
    """For each node, the reservation holding it now or next (those ended left out): what
    `csctl get systems` shows."""
    shown: dict[str, Reservation] = {}
    for r in sorted((r for r in reservations if r.end > now), key=lambda r: (r.start, r.name)):
        for node in r.nodes:
            shown.setdefault(node, r)
    return shown
