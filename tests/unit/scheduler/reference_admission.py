"""Reference: the admission walk as it was before the queue index (every job, in order, with
its reason built as it goes), kept verbatim as the rules the indexed admission must match.

Gang admission: a pure function from a queue snapshot and the pool to decisions.

Within a queue, order is priority, then submit time. A job gets every placement its plan
needs or nothing. The first job of a queue that does not fit (its head) holds what is free
of what it needs, and for each replica it cannot place on a shared node it holds back a whole
node that could host it once that node drains; it also sets its quota aside. Jobs behind it
in its queue may start only on what is left and within their queue's quota: backfill never
delays the head.

Across queues (scheduler/quotas.py): first every queue, lowest fair share first, starts what
fits within its quota; then, in the same order, queues borrow idle capacity beyond their
quota while the cohort can lend it. A queue whose next job may not borrow stops there. With
no queues defined there is one, `default`, owning the pool: the rules above reduce to one
priority queue.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from appliance.domain.backlog import Placement, QueuedJob
from appliance.domain.inventory import NodeKind, NodeState, NodeUsage
from appliance.domain.plan import ReplicaPlan, Role
from appliance.domain.queues import DEFAULT_QUEUE, Quota
from appliance.scheduler.quotas import Need, QuotaBook, never_fits

_KIND_OF_ROLE = {
    Role.CS2: NodeKind.SYSTEM,
    Role.MEMORYX: NodeKind.MEMORYX,
    Role.SWARMX: NodeKind.SWARMX,
}
_UNLIMITED = Quota(1 << 62, 1 << 62)


@dataclasses.dataclass(frozen=True)
class Decision:
    job_id: str
    placements: tuple[Placement, ...]


@dataclasses.dataclass(frozen=True)
class Head:
    """A queue's first job that did not fit. `within_quota`: it would run within its queue's
    quota, so what other queues borrow may be reclaimed for it."""

    job: QueuedJob
    within_quota: bool


@dataclasses.dataclass(frozen=True)
class Admission:
    admitted: list[Decision]
    # Every job left in the queue, with why it waits.
    pending: dict[str, str]
    # Each queue's head, in the order the queues were served.
    heads: tuple[Head, ...] = ()

    @property
    def head(self) -> QueuedJob | None:
        """The first head (with one queue: the one a preemption may make room for)."""
        return self.heads[0].job if self.heads else None


def admit(
    queue: Sequence[QueuedJob],
    pool: Sequence[NodeUsage],
    book: QuotaBook | None = None,
    shares: Mapping[str, float] | None = None,
) -> Admission:
    """Decide on `queue` (any order) over `pool`. `book`: the queues' quotas and holdings
    (None: one default queue owning the pool); `shares`: each queue's weighted fair share."""
    by_queue: dict[str, list[QueuedJob]] = {}
    for job in sorted(queue, key=lambda j: j.order):
        by_queue.setdefault(job.queue, []).append(job)
    if book is None:
        book = QuotaBook({DEFAULT_QUEUE: _UNLIMITED}, {})
    for name in by_queue:
        book.quotas.setdefault(name, Quota(0, 0))  # a queue since deleted: borrows only
        book.used.setdefault(name, Need(0, 0))
    shares = shares or {}
    # A queue without a share (one deleted while a job was submitted to it) goes last.
    order = sorted(by_queue, key=lambda name: (shares.get(name, math.inf), name))
    state = _Pass(pool, book)
    waiting: dict[str, int] = {}  # queue -> index of its first job that must borrow
    for name in order:
        jobs = by_queue[name]
        for index, job in enumerate(jobs):
            need = Need.of(job.plan)
            if state.never(job, need):
                continue
            if state.heads.get(name) is not None or book.within(name, need):
                state.try_within(job, need)
            elif name not in waiting:
                waiting[name] = index
                break
    for name in order:
        if name not in waiting:
            continue
        for job in by_queue[name][waiting[name] :]:
            state.try_borrowing(job, Need.of(job.plan))
    return Admission(state.admitted, state.pending, tuple(state.heads_in_order))


class _Pass:
    """The free capacity, quota book and outcomes of one admission pass."""

    def __init__(self, pool: Sequence[NodeUsage], book: QuotaBook) -> None:
        self.free = {u.node.name: u.free for u in pool}
        self.kinds = {u.node.name: u.node.kind for u in pool}
        self.usable = {
            u.node.name: u.node.capacity if u.node.state is NodeState.OK else 0 for u in pool
        }
        self.book = book
        self.admitted: list[Decision] = []
        self.pending: dict[str, str] = {}
        self.heads: dict[str, Head | None] = {}
        self.heads_in_order: list[Head] = []
        # While `free` is unchanged, jobs with the same plan shape fit (or not) the same way: a
        # queue of thousands of like jobs costs one fit per shape, not one per job.
        self._tried: dict[tuple[tuple[str, int, int], ...], tuple[list[Placement], str]] = {}

    def try_within(self, job: QueuedJob, need: Need) -> None:
        """A job that would run within its queue's quota (or stands behind its queue's head)."""
        head = self.heads.get(job.queue)
        if head is not None and not self.book.within(job.queue, need):
            self.pending[job.job_id] = self._behind(head, "")
            return
        placements, reason = self._fit(job.plan)
        if not reason:
            self._admit(job, need, placements)
        elif head is None:
            self._block(job, need, placements, reason, within_quota=True)
        else:
            self.pending[job.job_id] = self._behind(head, reason)

    def try_borrowing(self, job: QueuedJob, need: Need) -> None:
        """A job of a queue that reached its quota: it runs on what the cohort lends, or it
        is its queue's head and the queue stops here."""
        head = self.heads.get(job.queue)
        if self.never(job, need):
            return
        if head is not None:
            self.pending[job.job_id] = self._behind(head, "")
            return
        within = self.book.within(job.queue, need)
        why = "" if within else self.book.why_not_borrow(job.queue, need)
        placements, reason = self._fit(job.plan) if not why else ([], why)
        if not reason:
            self._admit(job, need, placements)
        else:
            self._block(job, need, placements, reason, within_quota=within, holds=not why)

    def never(self, job: QueuedJob, need: Need) -> bool:
        """A job its queue's limits can never let run (they changed since it was submitted)
        waits saying so, and holds nothing back: the jobs behind it go on."""
        why = never_fits(job.queue, self.book.quotas[job.queue], need)
        if why:
            self.pending[job.job_id] = f"can never run: {why}"
        return bool(why)

    def _admit(self, job: QueuedJob, need: Need, placements: list[Placement]) -> None:
        _take(self.free, placements)
        self._tried.clear()
        self.book.add(job.queue, need)
        self.admitted.append(Decision(job.job_id, tuple(placements)))

    def _block(
        self,
        job: QueuedJob,
        need: Need,
        placements: list[Placement],
        reason: str,
        *,
        within_quota: bool,
        holds: bool = True,
    ) -> None:
        """`job` is its queue's head: it holds what it can already get (capacity, and its
        quota when it runs within it) so that nothing behind it delays it."""
        if holds:
            _take(self.free, placements)
            _hold_for(job.plan, placements, self.free, self.kinds, self.usable)
            self._tried.clear()
        if within_quota:
            self.book.add(job.queue, need)
        head = Head(job, within_quota)
        self.heads[job.queue] = head
        self.heads_in_order.append(head)
        self.pending[job.job_id] = reason

    def _behind(self, head: Head, reason: str) -> str:
        where = f" in queue {head.job.queue}" if self.book.shared else ""
        behind = f"behind {describe(head.job)}{where}"
        return f"{reason}; {behind}" if reason else behind

    def _fit(self, plan: ReplicaPlan) -> tuple[list[Placement], str]:
        key = plan.shape
        if key not in self._tried:
            placements, shortfall = fit(plan, self.free, self.kinds)
            self._tried[key] = (placements, "; ".join(shortfall))
        return self._tried[key]


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
