"""The pool in the store: nodes, their admin-set states, what is placed on them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from appliance.domain.inventory import Node, NodeEvent, NodeKind, NodeState, NodeUsage
from appliance.store.base import StoreBase
from appliance.store.tables import JobRow, NodeEventRow, NodeRow, PlacementRow

MAX_NODE_EVENTS = 500  # what one read of a node's history returns: its newest changes


class PoolStore(StoreBase):
    """JobStore's part for the pool; its nodes (shape and states) are cached until a change of
    them. A read that overlaps a change is not cached: each change counts, and a read keeps
    what it read only if no change counted while it read."""

    _pool: list[Node] | None = None
    _pool_changes = 0

    def forget_pool(self) -> None:
        """Read the pool again on next use (a change may have come from elsewhere, e.g. from
        the coordinator that led before this one)."""
        self._pool_changes += 1
        self._pool = None

    def sync_pool(self, nodes: Sequence[Node]) -> None:
        """Make the stored pool match the configured one (names, kinds, capacities).

        A node removed from the configuration is kept while a job holds it, so nothing that
        runs loses its placement; states set by an admin are kept.
        """
        self.forget_pool()
        with self._sessions.begin() as s:
            existing = {r.name: r for r in s.scalars(select(NodeRow))}
            for node in nodes:
                row = existing.pop(node.name, None)
                if row is None:
                    s.add(
                        NodeRow(
                            name=node.name,
                            kind=node.kind.value,
                            capacity=node.capacity,
                            state=node.state.value,
                            wafer_bytes=node.wafer_bytes,
                        )
                    )
                else:
                    row.kind, row.capacity = node.kind.value, node.capacity
                    row.wafer_bytes = node.wafer_bytes
            held = set(s.scalars(select(PlacementRow.node).distinct()))
            for name, row in existing.items():
                if name not in held:
                    s.delete(row)
        self.forget_pool()

    def set_node_state(self, names: Iterable[str], state: NodeState) -> int:
        """Mark nodes ok, in error or in maintenance; returns how many exist."""
        with self._sessions.begin() as s:
            result = s.execute(
                update(NodeRow).where(NodeRow.name.in_(list(names))).values(state=state.value)
            )
        self.forget_pool()
        return int(result.rowcount)  # type: ignore[attr-defined]

    def change_node_state(
        self, name: str, state: NodeState, reason: str, by: str, now: float
    ) -> tuple[Node, list[tuple[str, int]]] | None:
        """Set one node's state with why and by whom, recording the change as a node event;
        returns the node and the (job, attempt) of each job holding part of it, or None for
        an unknown node."""
        with self._sessions.begin() as s:
            row = s.get(NodeRow, name, with_for_update=True)
            if row is None:
                return None
            row.state, row.reason, row.since = state.value, reason, now
            s.add(NodeEventRow(node=name, time=now, state=state.value, reason=reason, by=by))
            holders = _holders(s, [name])
            node = Node(
                row.name, NodeKind(row.kind), row.capacity, state, reason, now, row.wafer_bytes
            )
        self.forget_pool()
        return node, [(job_id, attempt) for _, job_id, attempt in holders]

    def holders_of(self, names: Sequence[str]) -> list[tuple[str, str, int]]:
        """(node, job, attempt) of every job holding part of the named nodes."""
        with self._sessions() as s:
            return _holders(s, names)

    def node_events(self, name: str, limit: int = MAX_NODE_EVENTS) -> list[NodeEvent]:
        """The newest `limit` state changes of a node, first first."""
        stmt = (
            select(NodeEventRow)
            .where(NodeEventRow.node == name)
            .order_by(NodeEventRow.seq.desc())
            .limit(limit)
        )
        with self._sessions() as s:
            newest = [
                NodeEvent(r.node, r.time, NodeState(r.state), r.reason, r.by)
                for r in s.scalars(stmt)
            ]
        return newest[::-1]

    def pool_usage(self) -> list[NodeUsage]:
        """Every node (in name order) with what the jobs placed on it hold."""
        nodes = self.pool()
        stmt = select(PlacementRow.node, func.sum(PlacementRow.amount)).group_by(PlacementRow.node)
        with self._sessions() as s:
            used = dict(s.execute(stmt).all())
        return [NodeUsage(node, int(used.get(node.name, 0))) for node in nodes]

    def node_usage(self, name: str) -> NodeUsage | None:
        """One node with what the jobs placed on it hold (None: no such node): what a change
        of its state answers, reading that node only (a change drops the cached pool, and
        2,048 changes re-reading the whole pool each were quadratic)."""
        used = (
            select(func.coalesce(func.sum(PlacementRow.amount), 0))
            .where(PlacementRow.node == NodeRow.name)
            .scalar_subquery()
        )
        stmt = select(*_NODE_COLUMNS, used).where(NodeRow.name == name)
        with self._sessions() as s:
            row = s.execute(stmt).first()
        return None if row is None else NodeUsage(_node(row), int(row[-1]))

    def cached_pool(self) -> list[Node] | None:
        """The pool if it is cached (no database access), else None."""
        return self._pool

    def pool(self) -> list[Node]:
        """The pool's nodes (names, kinds, capacities, states), cached until it changes."""
        pool = self._pool
        if pool is None:
            changes = self._pool_changes
            with self._sessions() as s:
                rows = s.execute(select(*_NODE_COLUMNS).order_by(NodeRow.name))
                pool = [_node(row) for row in rows]
            if changes == self._pool_changes:
                self._pool = pool
        return pool

    def node_holders(self) -> dict[str, list[str]]:
        """Which jobs hold something on each node."""
        stmt = select(PlacementRow.node, PlacementRow.job_id).distinct()
        holders: dict[str, list[str]] = {}
        with self._sessions() as s:
            for node, job_id in s.execute(stmt):
                holders.setdefault(node, []).append(job_id)
        return {node: sorted(jobs) for node, jobs in holders.items()}


# A Node as read (_node): name, kind, capacity, state, reason, since, wafer bytes.
_NODE_COLUMNS = (
    NodeRow.name, NodeRow.kind, NodeRow.capacity, NodeRow.state, NodeRow.reason, NodeRow.since,
    NodeRow.wafer_bytes,
)  # fmt: skip


def _node(row: Any) -> Node:
    name, kind, capacity, state, reason, since, wafer = row[:7]
    return Node(name, NodeKind(kind), capacity, NodeState(state), reason, since, wafer)


def _holders(s: Session, names: Sequence[str]) -> list[tuple[str, str, int]]:
    rows = s.execute(
        select(PlacementRow.node, JobRow.id, JobRow.attempt)
        .join(PlacementRow, PlacementRow.job_id == JobRow.id)
        .where(PlacementRow.node.in_(list(names)))
        .distinct()
        .order_by(PlacementRow.node, JobRow.id)
    ).all()
    return [(node, job_id, attempt) for node, job_id, attempt in rows]
