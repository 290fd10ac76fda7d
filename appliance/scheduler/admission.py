"""Gang admission: a pure function from a queue snapshot and the pool to decisions.

Order is priority, then submit time. A job gets every placement its plan needs or nothing.
The first job that does not fit (the head) reserves what is free of what it needs, and for
each replica it cannot place on a shared node it holds back a whole node that could host it
once that node drains. Jobs behind it may start only on what is left: backfill never delays
the head.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from appliance.domain.inventory import NodeKind, NodeState, NodeUsage
from appliance.domain.plan import ReplicaPlan, Role
from appliance.domain.queue import Placement, QueuedJob

_KIND_OF_ROLE = {
    Role.CS2: NodeKind.SYSTEM,
    Role.MEMORYX: NodeKind.MEMORYX,
    Role.SWARMX: NodeKind.SWARMX,
}


@dataclasses.dataclass(frozen=True)
class Decision:
    job_id: str
    placements: tuple[Placement, ...]


@dataclasses.dataclass(frozen=True)
class Admission:
    admitted: list[Decision]
    # Every job left in the queue, with why it waits.
    pending: dict[str, str]
    # The first job that did not fit (the one a preemption may make room for).
    head: QueuedJob | None = None


def admit(queue: Sequence[QueuedJob], pool: Sequence[NodeUsage]) -> Admission:
    free = {u.node.name: u.free for u in pool}
    kinds = {u.node.name: u.node.kind for u in pool}
    usable = {u.node.name: u.node.capacity if u.node.state is NodeState.OK else 0 for u in pool}
    admitted: list[Decision] = []
    pending: dict[str, str] = {}
    behind = ""  # "; behind <head>" once the head is known
    head: QueuedJob | None = None
    # While `free` is unchanged, jobs with the same plan shape fit (or not) the same way: a queue
    # of thousands of like jobs costs one _fit per shape, not one per job.
    tried: dict[tuple[tuple[str, int, int], ...], tuple[list[Placement], str]] = {}
    for job in sorted(queue, key=lambda j: j.order):
        key = job.plan.shape
        if key not in tried:
            placements, shortfall = fit(job.plan, free, kinds)
            tried[key] = (placements, "; ".join(shortfall))
        placements, reason = tried[key]
        if not reason:
            _take(free, placements)
            tried.clear()
            admitted.append(Decision(job.job_id, tuple(placements)))
        elif not behind:
            _take(free, placements)  # the head holds what it can already get
            _hold_for(job.plan, placements, free, kinds, usable)
            tried.clear()
            behind = f"; behind {describe(job)}"
            head = job
            pending[job.job_id] = reason
        else:
            pending[job.job_id] = reason + behind
    return Admission(admitted, pending, head)


def describe(job: QueuedJob) -> str:
    systems = job.plan.group(Role.CS2).count
    return f"{job.job_id} ({job.priority.name}, {systems} system{'s' if systems != 1 else ''})"


def fit(
    plan: ReplicaPlan, free: dict[str, int], kinds: dict[str, NodeKind]
) -> tuple[list[Placement], list[str]]:
    """Place as much of the plan as fits; return the placements and what could not be placed."""
    scratch = dict(free)
    placements: list[Placement] = []
    shortfall: list[str] = []
    for group in plan.groups:
        kind = _KIND_OF_ROLE.get(group.role)
        if kind is None:
            continue
        candidates = sorted(n for n, k in kinds.items() if k is kind)
        placed = 0
        for index in range(group.count):
            fitting = [n for n in candidates if scratch[n] >= group.demand]
            if not fitting:
                break
            # Systems fill in name order; shared nodes go to the one with the most room.
            node = fitting[0] if kind is NodeKind.SYSTEM else max(fitting, key=scratch.__getitem__)
            scratch[node] -= group.demand
            placements.append(Placement(f"{group.role}-{index}", group.role, node, group.demand))
            placed += 1
        if placed < group.count:
            shortfall.append(_shortfall(group.role, group.count, group.demand, free, kinds, kind))
    return placements, shortfall


def _shortfall(
    role: Role,
    count: int,
    demand: int,
    free: dict[str, int],
    kinds: dict[str, NodeKind],
    kind: NodeKind,
) -> str:
    if kind is NodeKind.SYSTEM:
        available = sum(1 for n, k in kinds.items() if k is kind and free[n] >= 1)
        return f"needs {count} system{'s' if count != 1 else ''}, {available} free"
    fits = sum(free[n] // demand for n, k in kinds.items() if k is kind and demand > 0)
    unit = (
        _gib(demand) if kind is NodeKind.MEMORYX else f"{demand} port{'s' if demand != 1 else ''}"
    )
    label = "MemoryX" if kind is NodeKind.MEMORYX else "SwarmX"
    return f"needs {count} {label} x {unit}, room for {fits}"


def _gib(num_bytes: int) -> str:
    return f"{num_bytes / (1 << 30):.2f} GiB"


def _hold_for(
    plan: ReplicaPlan,
    placements: Sequence[Placement],
    free: dict[str, int],
    kinds: dict[str, NodeKind],
    usable: dict[str, int],
) -> None:
    """Keep backfill off whole shared nodes the head will need for what it could not place."""
    for group in plan.groups:
        kind = _KIND_OF_ROLE.get(group.role)
        if kind is None or kind is NodeKind.SYSTEM:
            continue  # busy systems are exclusive anyway; the head gets them first when freed
        missing = group.count - sum(1 for p in placements if p.role is group.role)
        candidates = sorted(
            (
                n
                for n, k in kinds.items()
                if k is kind and free[n] > 0 and usable[n] >= group.demand
            ),
            key=lambda n: (-free[n], n),
        )
        for node in candidates[:missing]:
            free[node] = 0


def _take(free: dict[str, int], placements: Sequence[Placement]) -> None:
    for p in placements:
        free[p.node] -= p.amount
