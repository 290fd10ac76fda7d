"""The pool as the client reports it: one `NodeStatus` per CS-2 system, MemoryX or SwarmX node."""

from __future__ import annotations

import dataclasses
from typing import TypeVar

from appliance._proto.v1 import cluster_pb2
from appliance.domain.inventory import NodeEvent, NodeKind, NodeState

_E = TypeVar("_E", NodeKind, NodeState)


@dataclasses.dataclass(frozen=True)
class NodeStatus:
    """One node of the pool and what holds it.

    `capacity` and `used` are 1/0-or-1 for a system, bytes for MemoryX and ports for SwarmX;
    `jobs` are the ids of the jobs holding part of the node.
    """

    name: str
    kind: NodeKind
    state: NodeState
    capacity: int
    used: int
    jobs: tuple[str, ...] = ()
    reason: str = ""  # why an admin set the state
    since: float = 0.0  # when (Unix time; 0: never changed)
    reservation: str = ""  # the reservation holding it now, or the next one

    @property
    def free(self) -> int:
        """What a new job could still get here: nothing unless the node is `ok`."""
        return max(0, self.capacity - self.used) if self.state is NodeState.OK else 0


def node_from_pb(msg: cluster_pb2.Node) -> NodeStatus:
    """The wire form of a node. A state this client does not know counts as `error` (not
    schedulable); an unknown kind is shown as a system."""
    return NodeStatus(
        name=msg.name,
        kind=_enum(NodeKind, msg.kind, NodeKind.SYSTEM),
        state=_enum(NodeState, msg.state, NodeState.ERROR),
        capacity=msg.capacity,
        used=msg.used,
        jobs=tuple(msg.jobs),
        reason=msg.reason,
        since=msg.since,
        reservation=msg.reservation,
    )


def node_event_from_pb(msg: cluster_pb2.NodeEvent) -> NodeEvent:
    return NodeEvent(
        node=msg.node,
        time=msg.time,
        state=_enum(NodeState, msg.state, NodeState.ERROR),
        reason=msg.reason,
        by=msg.by,
    )


def _enum(cls: type[_E], value: str, unknown: _E) -> _E:
    try:
        return cls(value)
    except ValueError:
        return unknown
