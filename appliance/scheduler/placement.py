"""Where a plan's replicas go: systems fill in name order; a replica on a shared node (MemoryX,
SwarmX, an input worker's slot on a worker node) goes to the node of its kind with the most
room (the lowest name among equals).

`fit` does it on a plain map of free capacity (preemption's trials). `FreeCapacity` keeps the
same map with each kind also in placement order, so that one admission pass over a pool of
thousands of nodes places a job in time that grows with the job, not with the pool.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Mapping, Sequence

from sortedcontainers import SortedList

from appliance.domain.backlog import Placement
from appliance.domain.inventory import NodeKind, NodeState, NodeUsage
from appliance.domain.plan import PlanShape, ReplicaGroup, ReplicaPlan, Role

KIND_OF_ROLE = {
    Role.CS2: NodeKind.SYSTEM,
    Role.MEMORYX: NodeKind.MEMORYX,
    Role.SWARMX: NodeKind.SWARMX,
    Role.WORKER: NodeKind.WORKER,
}
SHARED_KINDS = (NodeKind.MEMORYX, NodeKind.SWARMX, NodeKind.WORKER)
# How a user reads a replica's demand on a shared node (MemoryX's in GiB).
_UNITS = {NodeKind.SWARMX: ("SwarmX", "port"), NodeKind.WORKER: ("worker-node", "slot")}


def fit(
    plan: ReplicaPlan, free: dict[str, int], kinds: dict[str, NodeKind]
) -> tuple[list[Placement], list[str]]:
    """Place as much of the plan as fits; return the placements and what could not be placed."""
    scratch = dict(free)
    placements: list[Placement] = []
    shortfall: list[str] = []
    for group in plan.groups:
        kind = KIND_OF_ROLE.get(group.role)
        if kind is None:
            continue
        candidates = sorted(n for n, k in kinds.items() if k is kind)
        placed = 0
        for index in range(group.count):
            fitting = [n for n in candidates if scratch[n] >= group.demand]
            if not fitting:
                break
            node = fitting[0] if kind is NodeKind.SYSTEM else max(fitting, key=scratch.__getitem__)
            scratch[node] -= group.demand
            placements.append(Placement(f"{group.role}-{index}", group.role, node, group.demand))
            placed += 1
        if placed < group.count:
            shortfall.append(shortfall_of(group, free, kinds, kind))
    return placements, shortfall


def fits(
    plan: ReplicaPlan, free: Mapping[str, int], names: Mapping[NodeKind, Sequence[str]]
) -> bool:
    """Whether `fit` would place all of the plan (`names`: the nodes of each kind), without
    placing it: a group alone on its kind fits when its nodes have room for `count` replicas
    between them, whichever node each would go to; kinds shared by groups are fitted."""
    groups = [(KIND_OF_ROLE[g.role], g) for g in plan.groups if g.role in KIND_OF_ROLE]
    kinds = [kind for kind, _ in groups]
    if len(set(kinds)) < len(kinds):
        by_name = {n: kind for kind in set(kinds) for n in names.get(kind, ())}
        return not fit(plan, dict(free), by_name)[1]
    for kind, group in groups:
        nodes = names.get(kind, ())
        if group.demand > 0:
            room = sum(_slots(free[n], group.demand) for n in nodes)
        else:  # a replica of no demand goes to any node not used beyond its capacity
            room = group.count if any(free[n] >= group.demand for n in nodes) else 0
        if room < group.count:
            return False
    return True


def shortfall_of(
    group: ReplicaGroup, free: Mapping[str, int], kinds: Mapping[str, NodeKind], kind: NodeKind
) -> str:
    """What a group that cannot be placed on `free` needs, and what there is."""
    if kind is NodeKind.SYSTEM:
        available = sum(1 for n, k in kinds.items() if k is kind and free[n] >= 1)
        return lacks(kind, group.count, group.demand, available)
    demand = group.demand
    room = sum(free[n] // demand for n, k in kinds.items() if k is kind and demand > 0)
    return lacks(kind, group.count, demand, room)


def lacks(kind: NodeKind, count: int, demand: int, available: int) -> str:
    """A group's shortfall as a user reads it: systems free, or replicas a shared kind has
    room for."""
    if kind is NodeKind.SYSTEM:
        return f"needs {count} system{'s' if count != 1 else ''}, {available} free"
    if kind is NodeKind.MEMORYX:
        label, unit = "MemoryX", f"{demand / (1 << 30):.2f} GiB"
    else:
        label, noun = _UNITS[kind]
        unit = f"{demand} {noun}{'s' if demand != 1 else ''}"
    return f"needs {count} {label} x {unit}, room for {available}"


Counts = tuple[int, dict[tuple[NodeKind, int], int]]


def _slots(free: int, demand: int) -> int:
    return max(0, free // demand) if demand > 0 else 0


class FreeCapacity:
    """Free capacity of every node during one pass, with each kind kept in placement order.

    For every replica demand the pass may meet (`demands`), it also keeps how many replicas of
    that demand the nodes of its kind have room for between them: whether a plan fits, and
    what it lacks, are then a few lookups. (A node used beyond its capacity, which only a
    pool shrunk under running jobs has, counts as having no room.)
    """

    def __init__(
        self,
        pool: Sequence[NodeUsage],
        demands: Iterable[tuple[NodeKind, int]],
        first: Collection[str] = frozenset(),
    ) -> None:
        """`first`: systems to fill before the others (a reservation's, for its jobs)."""
        self.free = {u.node.name: u.free for u in pool}
        self.kinds = {u.node.name: u.node.kind for u in pool}
        self.usable = {
            u.node.name: u.node.capacity if u.node.state is NodeState.OK else 0 for u in pool
        }
        self.names: dict[NodeKind, list[str]] = {kind: [] for kind in NodeKind}
        for name in sorted(self.free):
            self.names[self.kinds[name]].append(name)
        # Systems with room, in name order (`first` before the rest); shared nodes by (most
        # room first, name).
        with_room = (n for n in self.names[NodeKind.SYSTEM] if self.free[n] >= 1)
        self._systems = (
            SortedList(with_room, key=lambda n: (n not in first, n))
            if first
            else SortedList(with_room)
        )
        self._shared = {
            kind: SortedList((-self.free[n], n) for n in self.names[kind]) for kind in SHARED_KINDS
        }
        self._demands: dict[NodeKind, list[int]] = {kind: [] for kind in NodeKind}
        self.slots: dict[tuple[NodeKind, int], int] = {}
        for kind, demand in set(demands):
            self._count_slots(kind, demand)

    def _count_slots(self, kind: NodeKind, demand: int) -> int:
        count = sum(_slots(self.free[n], demand) for n in self.names[kind])
        self._demands[kind].append(demand)
        self.slots[(kind, demand)] = count
        return count

    def counts(self) -> Counts:
        """What `shortfall` needs to say later what a plan lacked now."""
        return len(self._systems), dict(self.slots)

    def place(self, plan: ReplicaPlan) -> tuple[list[Placement], bool]:
        """As much of the plan as fits (what `fit` places), and whether all of it did."""
        placements: list[Placement] = []
        complete = True
        for group in plan.groups:
            kind = KIND_OF_ROLE.get(group.role)
            if kind is None:
                continue
            if kind is NodeKind.SYSTEM and group.demand == 1:
                nodes = list(self._systems.islice(0, group.count))
            else:
                nodes = self._pick(group, kind)
            placements += [
                Placement(f"{group.role}-{i}", group.role, node, group.demand)
                for i, node in enumerate(nodes)
            ]
            complete = complete and len(nodes) == group.count
        return placements, complete

    def fits(self, shape: PlanShape) -> bool:
        """Whether `place` would place all of a plan of this shape (nothing is built)."""
        return not self._lacking(shape, self.counts())

    def shortfall(self, shape: PlanShape, counts: Counts | None = None) -> str:
        """What of a plan of this shape did not fit when `counts` were taken (by default:
        now), "; "-joined as `fit` says it ("" if it fits)."""
        counts = self.counts() if counts is None else counts
        free_systems, _ = counts
        said = [
            lacks(kind, count, demand, free_systems if kind is NodeKind.SYSTEM else room)
            for kind, count, demand, room in self._lacking(shape, counts)
        ]
        return "; ".join(said)

    def _lacking(self, shape: PlanShape, counts: Counts) -> list[tuple[NodeKind, int, int, int]]:
        """(kind, count, demand, room) of each group of the shape that does not fit."""
        _, slots = counts
        lacking = []
        for role, count, demand in shape:
            kind = KIND_OF_ROLE.get(Role(role))
            if kind is None:
                continue
            if demand <= 0:  # fits wherever there is a node of its kind
                if not self.names[kind]:
                    lacking.append((kind, count, demand, 0))
                continue
            room = slots.get((kind, demand))
            if room is None:
                room = self._count_slots(kind, demand)
            if room < count:
                lacking.append((kind, count, demand, room))
        return lacking

    def _pick(self, group: ReplicaGroup, kind: NodeKind) -> list[str]:
        """Nodes for the group's replicas one by one, each where there is the most room then
        (a node already given to one of them counts with what that one takes)."""
        if kind is NodeKind.SYSTEM:  # systems with an unusual demand: the plain way
            return [p.node for p in fit(ReplicaPlan((group,), 0), self.free, self.kinds)[0]]
        ordered = self._shared[kind]
        taken: dict[str, int] = {}  # node -> its room after what this group took of it
        nodes: list[str] = []
        for _ in range(group.count):
            best: tuple[int, str] | None = None
            for negative, name in ordered:  # the first node not taken yet is the roomiest
                if name not in taken:
                    best = (negative, name)
                    break
            for name, room in taken.items():
                if best is None or (-room, name) < best:
                    best = (-room, name)
            if best is None or -best[0] < group.demand:
                break
            node = best[1]
            taken[node] = -best[0] - group.demand
            nodes.append(node)
        return nodes

    def take(self, placements: Sequence[Placement]) -> None:
        for p in placements:
            self.set(p.node, self.free[p.node] - p.amount)

    def set(self, node: str, value: int) -> None:
        """Change a node's free capacity, keeping the orders and the room counts."""
        old = self.free[node]
        if old == value:
            return
        self.free[node] = value
        kind = self.kinds[node]
        if kind is NodeKind.SYSTEM:
            if old >= 1 > value:
                self._systems.remove(node)
            elif value >= 1 > old:
                self._systems.add(node)
        else:
            ordered = self._shared[kind]
            ordered.remove((-old, node))
            ordered.add((-value, node))
        for demand in self._demands[kind]:
            self.slots[(kind, demand)] += _slots(value, demand) - _slots(old, demand)

    def hold_for(self, plan: ReplicaPlan, placements: Sequence[Placement]) -> None:
        """Keep backfill off whole shared nodes the head will need for what it could not
        place (busy systems are exclusive anyway: the head gets them first when freed)."""
        for group in plan.groups:
            kind = KIND_OF_ROLE.get(group.role)
            if kind is None or kind is NodeKind.SYSTEM:
                continue
            missing = group.count - sum(1 for p in placements if p.role is group.role)
            if missing <= 0:  # (most heads: they lack systems, not shared room)
                continue
            free, usable = self.free, self.usable
            room = (n for n in self.names[kind] if free[n] > 0 and usable[n] >= group.demand)
            candidates = heapq.nsmallest(missing, room, key=lambda n: (-free[n], n))
            for node in candidates:
                self.set(node, 0)
