"""The part of an admission pass that backfills by time limits (EASY backfill, as Slurm's):
behind a blocked head, on what the head holds, start what ends by the head's shadow time, or,
when the head lacks only systems, what takes only the systems it will not need then. The
arithmetic is scheduler/backfill.py's; this is the walk, a part of admission's pass
(scheduler/admission.py), which owns the state it reads.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from appliance.domain.backlog import Placement, QueuedJob, Release
from appliance.domain.inventory import NodeKind
from appliance.domain.plan import PlanShape, Role
from appliance.scheduler.backfill import (
    MAX_BACKFILL_TESTS,
    ends_by,
    hold_again,
    shadow_of,
    shadow_time,
)
from appliance.scheduler.backlog_index import BacklogIndex
from appliance.scheduler.placement import FreeCapacity
from appliance.scheduler.quotas import Need


class LimitsBackfill:
    """Admission's pass, its backfill by time limits (a part of `_Pass`, which sets these)."""

    index: BacklogIndex
    capacity: FreeCapacity
    skip: Collection[str]
    # The running jobs' ends (and those this pass starts), and now; None: no backfill by
    # time limits.
    releases: list[Release] | None
    now: float
    _only_systems: bool  # the blocked head decided on lacks only systems
    _admitted: set[str]

    if TYPE_CHECKING:

        @property
        def capped(self) -> bool: ...

        def need(self, shape: PlanShape) -> Need: ...

        def _fits_behind(self, name: str, shape: PlanShape) -> bool: ...

        def over_user_cap(self, job: QueuedJob, need: Need) -> bool: ...

        def _admit(self, job: QueuedJob, need: Need, placements: list[Placement]) -> None: ...

    def _backfill_by_limits(
        self, name: str, head: QueuedJob, before: dict[str, int], held: dict[str, int]
    ) -> None:
        """Behind a blocked head, on what it holds (`held`, by node; `before`: what was free
        before it did): admit in order each job (of the first MAX_BACKFILL_TESTS) that ends by
        its shadow time, then, when it lacks only systems, each that takes only the systems
        it will not need then (scheduler/backfill.py); what is left is held for it again."""
        assert self.releases is not None
        kinds = self.capacity.kinds
        at = shadow_time(self.now, before, kinds, head.plan, self.releases)
        if at is None:
            return
        for node, amount in held.items():  # offered to what does not delay the head
            self.capacity.set(node, self.capacity.free[node] + amount)
        self._backfill_where(name, head, lambda job, need: ends_by(self.now, job, at))
        systems = sum(a for n, a in held.items() if kinds[n] is NodeKind.SYSTEM)
        needs = head.plan.group(Role.CS2).count
        shadow = shadow_of(self.now, systems, needs, self.releases) if self._only_systems else None
        left = dict(held)
        if shadow is not None and shadow.extra > 0:
            hold_again(self.capacity, left, lambda node: kinds[node] is not NodeKind.SYSTEM)
            extra = [shadow.extra]

            def spare(job: QueuedJob, need: Need) -> bool:
                if need.systems > extra[0]:
                    return False
                extra[0] -= need.systems
                return True

            self._backfill_where(name, head, spare)
        hold_again(self.capacity, left, lambda node: True)

    def _backfill_where(
        self, name: str, head: QueuedJob, allowed: Callable[[QueuedJob, Need], bool]
    ) -> None:
        """Admit in order each job behind `head` (of the first MAX_BACKFILL_TESTS) that fits
        now and that `allowed` lets start (asked only of one that fits)."""
        for tested, job in enumerate(self.index.in_order(name, head.order)):
            if tested >= MAX_BACKFILL_TESTS or self.capped:
                return
            if job.job_id in self.skip or job.job_id in self._admitted:
                continue
            need = self.need(job.plan.shape)
            if not self._fits_behind(name, job.plan.shape) or not allowed(job, need):
                continue
            if self.over_user_cap(job, need):
                continue
            placements, complete = self.capacity.place(job.plan)
            if complete:
                self._admit(job, need, placements)
