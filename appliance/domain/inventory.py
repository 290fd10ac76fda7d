"""The cluster's finite pool: named CS-2 systems, MemoryX, SwarmX and input-worker nodes."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence

from appliance.domain.wafer import WAFER_BYTES


class NodeKind(enum.StrEnum):
    SYSTEM = "system"  # a CS-2, exclusive per job
    MEMORYX = "memoryx"  # shared by memory capacity
    SWARMX = "swarmx"  # shared by port capacity
    WORKER = "worker"  # input workers (CPU nodes reading data sets), shared by slots


class NodeState(enum.StrEnum):
    """An admin-set state. Only an ok node takes new jobs. A drained node keeps what runs on
    it until it ends; a node in error or maintenance is taken from the jobs on it (each is
    requeued or failed by its restart policy)."""

    OK = "ok"
    ERROR = "error"
    MAINTENANCE = "maintenance"
    DRAIN = "drain"

    @property
    def takes_jobs_away(self) -> bool:
        return self in (NodeState.ERROR, NodeState.MAINTENANCE)


@dataclasses.dataclass(frozen=True)
class Node:
    """One entry of the pool. `capacity` is 1 for systems, bytes for MemoryX, ports for SwarmX,
    input-worker slots for a worker node. `wafer_bytes`: a system's on-chip memory (a CS-2's
    40 GB unless configured; other kinds ignore it)."""

    name: str
    kind: NodeKind
    capacity: int
    state: NodeState = NodeState.OK
    reason: str = ""  # why an admin set the state
    since: float = 0.0  # when (0: never changed)
    wafer_bytes: int = WAFER_BYTES


@dataclasses.dataclass(frozen=True)
class NodeEvent:
    """A change of a node's state."""

    node: str
    time: float
    state: NodeState
    reason: str
    by: str


@dataclasses.dataclass(frozen=True)
class NodeUsage:
    """A node with what the running jobs hold on it."""

    node: Node
    used: int

    @property
    def free(self) -> int:
        return self.node.capacity - self.used if self.node.state is NodeState.OK else 0


def default_pool(
    systems: int = 4,
    memoryx: int = 4,
    swarmx: int = 2,
    memoryx_bytes: int = 16 << 30,
    swarmx_ports: int = 4,
    workers: int = 2,
    worker_slots: int = 8,
    wafer_bytes: int = WAFER_BYTES,
) -> list[Node]:
    """The embedded default: cs2-01..04, memx-01..04 (16 GiB each), swarmx-01..02 (4 ports),
    worker-01..02 (8 input-worker slots each)."""
    return named_pool(
        [f"cs2-{i:02d}" for i in range(1, systems + 1)],
        [f"memx-{i:02d}" for i in range(1, memoryx + 1)],
        [f"swarmx-{i:02d}" for i in range(1, swarmx + 1)],
        memoryx_bytes=memoryx_bytes,
        swarmx_ports=swarmx_ports,
        workers=[f"worker-{i:02d}" for i in range(1, workers + 1)],
        worker_slots=worker_slots,
        wafer_bytes=wafer_bytes,
    )


def named_pool(
    systems: list[str],
    memoryx: list[str],
    swarmx: list[str],
    *,
    memoryx_bytes: int,
    swarmx_ports: int,
    workers: Sequence[str] = (),
    worker_slots: int = 8,
    wafer_bytes: int = WAFER_BYTES,
    wafers: Mapping[str, int] | None = None,
) -> list[Node]:
    """A pool of the named nodes; every node of a shared kind has the same capacity, every
    system a wafer of `wafer_bytes` unless `wafers` names its own."""
    own = wafers or {}
    return (
        [
            Node(name, NodeKind.SYSTEM, 1, wafer_bytes=own.get(name, wafer_bytes))
            for name in systems
        ]
        + [Node(name, NodeKind.MEMORYX, memoryx_bytes) for name in memoryx]
        + [Node(name, NodeKind.SWARMX, swarmx_ports) for name in swarmx]
        + [Node(name, NodeKind.WORKER, worker_slots) for name in workers]
    )
