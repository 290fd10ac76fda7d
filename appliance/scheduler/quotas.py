"""Quota accounting of one admission pass: what each queue holds against its quota, and what
the cohort (every queue sharing the pool) can lend.

A job's need is its CS-2 systems and its MemoryX bytes. A queue runs within its quota while
what it holds stays within its nominal quota in both. Beyond that it borrows, within its
borrowing limit, and only while what all queues borrow stays within what the lending queues
leave idle of their quotas (a queue that does not lend keeps its idle quota to itself).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from appliance.domain.plan import ReplicaPlan, Role
from appliance.domain.queues import Quota, gib


@dataclasses.dataclass(frozen=True)
class Need:
    systems: int
    memoryx_bytes: int

    @staticmethod
    def of(plan: ReplicaPlan) -> Need:
        systems = memoryx = 0
        for group in plan.groups:
            if group.role is Role.CS2:
                systems += group.count
            elif group.role is Role.MEMORYX:
                memoryx += group.count * group.demand
        return Need(systems, memoryx)

    def plus(self, other: Need) -> Need:
        return Need(self.systems + other.systems, self.memoryx_bytes + other.memoryx_bytes)

    def minus(self, other: Need) -> Need:
        return Need(self.systems - other.systems, self.memoryx_bytes - other.memoryx_bytes)


NOTHING = Need(0, 0)


def never_fits(queue: str, quota: Quota, need: Need) -> str:
    """Why a job of that need can never run in the queue, whatever else runs ("" if it
    can): it needs more than the queue's quota and borrowing limit together."""
    if quota.borrow_systems is not None and need.systems > quota.systems + quota.borrow_systems:
        return (
            f"queue {queue} may hold at most {_systems(quota.systems + quota.borrow_systems)} "
            f"(its quota and borrowing limit); the job needs {need.systems}"
        )
    limit = quota.borrow_memoryx_bytes
    if limit is not None and need.memoryx_bytes > quota.memoryx_bytes + limit:
        return (
            f"queue {queue} may hold at most {gib(quota.memoryx_bytes + limit)} of MemoryX "
            f"(its quota and borrowing limit); the job needs {gib(need.memoryx_bytes)}"
        )
    return ""


class QuotaBook:
    """Per queue, what it holds (and what its blocked head has set aside) against its quota."""

    def __init__(self, quotas: Mapping[str, Quota], used: Mapping[str, Need]) -> None:
        self.quotas = dict(quotas)
        self.used = {name: used.get(name, NOTHING) for name in self.quotas}
        # What the lending queues leave idle of their quotas and what all queues borrow,
        # summed once and kept up to date by `add`: asking whether a queue may borrow costs
        # the same with 30 queues as with 2 (a pass asks once per queue and job that borrows).
        self._totals: tuple[Need, Need] | None = None

    @property
    def shared(self) -> bool:
        """More than one queue has a quota or work: quota rules (and words) apply."""
        return len(self.quotas) > 1

    def within(self, queue: str, need: Need) -> bool:
        quota, after = self.quotas[queue], self.used[queue].plus(need)
        return after.systems <= quota.systems and after.memoryx_bytes <= quota.memoryx_bytes

    def add(self, queue: str, need: Need) -> None:
        before = self.used[queue]
        self.used[queue] = after = before.plus(need)
        if self._totals is not None:
            self._totals = self._moved(queue, before, after, *self._totals)

    def _sums(self) -> tuple[Need, Need]:
        """(idle to lend, borrowed) over every queue, as `used` has them now."""
        if self._totals is None:
            self._totals = (self._idle_to_lend(self.used), self._borrowed(self.used))
        return self._totals

    def _moved(
        self, queue: str, before: Need, after: Need, idle: Need, borrowed: Need
    ) -> tuple[Need, Need]:
        """The sums once `queue` holds `after` instead of `before`."""
        quota = self.quotas[queue]
        if quota.lend:
            idle = idle.minus(_over(quota, before, sign=-1)).plus(_over(quota, after, sign=-1))
        borrowed = borrowed.minus(_over(quota, before)).plus(_over(quota, after))
        return idle, borrowed

    def why_not_borrow(self, queue: str, need: Need) -> str:
        """Why the queue may not take `need` beyond its quota now ("" if it may)."""
        quota, used = self.quotas[queue], self.used[queue]
        after = used.plus(need)
        over = Need(after.systems - quota.systems, after.memoryx_bytes - quota.memoryx_bytes)
        limit = quota.borrow_systems
        if limit is not None and over.systems > limit:
            return (
                f"queue {queue} may borrow at most {_systems(limit)} beyond its "
                f"{quota.systems} and needs {_systems(over.systems)} more"
            )
        limit = quota.borrow_memoryx_bytes
        if limit is not None and over.memoryx_bytes > limit:
            return (
                f"queue {queue} may borrow at most {gib(limit)} of MemoryX beyond its "
                f"{gib(quota.memoryx_bytes)}"
            )
        lent, borrowed = self._moved(queue, used, after, *self._sums())
        if borrowed.systems > lent.systems or borrowed.memoryx_bytes > lent.memoryx_bytes:
            idle = self._lendable_to(queue)
            if borrowed.systems > lent.systems:
                return (
                    f"queue {queue} uses {used.systems} of its {_systems(quota.systems)}; "
                    f"cohort has {idle.systems} idle to lend"
                )
            return (
                f"queue {queue} uses {gib(used.memoryx_bytes)} of its "
                f"{gib(quota.memoryx_bytes)} of MemoryX; cohort has {gib(idle.memoryx_bytes)} "
                "idle to lend"
            )
        return ""

    def _lendable_to(self, queue: str) -> Need:
        """What the other queues leave idle of their quotas and no queue borrows yet."""
        quota = self.quotas[queue]
        idle, taken = self._sums()  # taken: by the queue itself too
        if quota.lend:
            idle = idle.minus(_over(quota, self.used[queue], sign=-1))
        return Need(
            max(0, idle.systems - taken.systems), max(0, idle.memoryx_bytes - taken.memoryx_bytes)
        )

    def borrowing(self, queue: str) -> bool:
        quota, used = self.quotas[queue], self.used[queue]
        return used.systems > quota.systems or used.memoryx_bytes > quota.memoryx_bytes

    def _idle_to_lend(self, used: Mapping[str, Need]) -> Need:
        return _total(_over(q, used[n], sign=-1) for n, q in self.quotas.items() if q.lend)

    def _borrowed(self, used: Mapping[str, Need]) -> Need:
        return _total(_over(q, used[n]) for n, q in self.quotas.items())


def _total(needs: Iterable[Need]) -> Need:
    total = NOTHING
    for need in needs:
        total = total.plus(need)
    return total


def _systems(count: int) -> str:
    return f"{count} system{'s' if count != 1 else ''}"


def _over(quota: Quota, used: Need, sign: int = 1) -> Need:
    """What `used` is over the quota (sign -1: what it leaves idle of it), never below 0."""
    return Need(
        max(0, sign * (used.systems - quota.systems)),
        max(0, sign * (used.memoryx_bytes - quota.memoryx_bytes)),
    )
