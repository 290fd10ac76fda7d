"""Whether the pool's largest job can run on the cluster's nodes at all (pure).

The scheduler admits a job against the pool (CS-2 systems, MemoryX, SwarmX, input-worker
slots); Kubernetes then has to place its pods, each with the requests of its role. A pool
larger than the nodes can hold promises jobs that sit pending until the pending timeout fails
them. This check packs the pods of the pool's largest job (every system; MemoryX and SwarmX
replicas up to what the plan can give such a job; an input worker per system when the pool
has worker nodes) into the nodes' allocatable CPU and memory, first fit by decreasing size,
and says in a sentence when they do not fit. Allocatable is before the pods already running
(the cluster's own, the coordinator), so a job that "fits" may still wait for room.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from appliance.backends.kubernetes.quantities import cpu_millis, memory_bytes
from appliance.domain.inventory import Node, NodeKind
from appliance.domain.plan import Role

GIB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Room:
    """CPU (millicores) and memory (bytes): what a pod asks, or what a node has."""

    cpu: float
    memory: float

    def describe(self) -> str:
        return f"{self.cpu / 1000:.2f} CPU, {self.memory / GIB:.2f} GiB"


def largest_job(pool: Sequence[Node]) -> dict[Role, int]:
    """Replicas by role of the largest job the pool admits: one chief, a CS-2 replica per
    system, MemoryX on every MemoryX node (a model as large as they hold), the SwarmX nodes
    the plan gives that many systems, and when the pool has worker nodes, the input workers of
    a job reading a data set (one per system, runconfig.num_workers_per_csx's default)."""
    systems = sum(1 for n in pool if n.kind is NodeKind.SYSTEM)
    memoryx = [n for n in pool if n.kind is NodeKind.MEMORYX]
    swarmx = [n for n in pool if n.kind is NodeKind.SWARMX]
    fanout = max((n.capacity for n in swarmx), default=1) or 1
    slots = sum(n.capacity for n in pool if n.kind is NodeKind.WORKER)
    counts = {
        Role.CHIEF: 1,
        Role.CS2: systems,
        Role.MEMORYX: len(memoryx),
        Role.SWARMX: min(len(swarmx), math.ceil(systems / fanout)),
    }
    if slots:
        counts[Role.WORKER] = min(slots, systems)
    return counts


def node_room(node: Mapping[str, Any]) -> Room | None:
    """The allocatable room of a node our pods may land on (None: cordoned, tainted against
    pods without tolerations, or saying nothing about its room)."""
    spec, status = node.get("spec") or {}, node.get("status") or {}
    if spec.get("unschedulable"):
        return None
    if any(t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or []):
        return None
    allocatable = status.get("allocatable") or {}
    try:
        return Room(cpu_millis(str(allocatable["cpu"])), memory_bytes(str(allocatable["memory"])))
    except (KeyError, ValueError):
        return None


def fit_problem(
    pool: Sequence[Node],
    requests_of: Callable[[Role], Mapping[str, str]],
    nodes: Sequence[Mapping[str, Any]],
) -> str | None:
    """None when the largest job's pods pack into the nodes; else what does not fit and what
    to change."""
    counts = largest_job(pool)
    asks = {
        role: Room(cpu_millis(requests_of(role)["cpu"]), memory_bytes(requests_of(role)["memory"]))
        for role in counts
    }
    pods = sorted(
        (asks[role] for role, count in counts.items() for _ in range(count)),
        key=lambda r: (r.cpu, r.memory),
        reverse=True,
    )
    rooms = [room for room in map(node_room, nodes) if room is not None]
    free = [[room.cpu, room.memory] for room in rooms]
    placed = 0
    for pod in pods:
        for left in free:
            if pod.cpu <= left[0] and pod.memory <= left[1]:
                left[0] -= pod.cpu
                left[1] -= pod.memory
                placed += 1
                break
    if placed == len(pods):
        return None
    total = Room(sum(p.cpu for p in pods), sum(p.memory for p in pods))
    have = Room(sum(r.cpu for r in rooms), sum(r.memory for r in rooms))
    replicas = ", ".join(f"{count} {role}" for role, count in counts.items())
    return (
        f"the pool's largest job ({replicas} replicas: {total.describe()} requested) does not "
        f"fit the allocatable room of the {len(rooms)} schedulable node(s) ({have.describe()}); "
        "its pods would stay pending until the pending timeout fails it: lower the replicas' "
        "requests (chart value replicaResources, APPLIANCE_KUBE_REPLICA_RESOURCES), shrink the "
        "pool, or add nodes"
    )
