"""Backfill by time limits (EASY backfill, as Slurm's): a pure decision on when a blocked head
could start and which job behind it may start now without delaying it.

A queue's head that does not fit holds what it can get. Its *shadow time* is when it would
fit: the running jobs' ends by their time limits (start plus limit; a job without a limit never
ends as far as this knows), earliest first, each giving back what it holds, until the head's
plan fits on what is free then. A job behind it may then start at once on what the head holds
if it fits and its own limit ends by the shadow time (all is back before the head could use
it). When the head lacks only CS-2 systems, a job may also take systems the head will not need
at the shadow time (the *extra*: the systems free then beyond the head's need), whatever its
limit. Either way the head starts no later than it would without it. With no shadow time (a
job it waits for has no limit) nothing backfills this way: the head's hold stands, as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence

from appliance.domain.backlog import Placement, QueuedJob, Release
from appliance.domain.inventory import NodeKind
from appliance.domain.plan import ReplicaPlan, Role
from appliance.scheduler.placement import KIND_OF_ROLE, FreeCapacity, fit

# Jobs behind a head one pass looks at for backfill by time limits (Slurm's bf_max_job_test):
# the pass's cost stays bounded however long the queue.
MAX_BACKFILL_TESTS = 256
# Times one pass tries a head's whole plan on what the running jobs give back (the systems are
# counted first, for nothing): past it the head has no shadow time, and only its hold stands.
MAX_SHADOW_CHECKS = 32


@dataclasses.dataclass(frozen=True)
class Shadow:
    """When the head can start at the latest (by the running jobs' limits), and how many
    systems free then it will not need."""

    at: float
    extra: int

    def allows(self, now: float, run_limit: float | None, systems: int) -> bool:
        """Whether a job of `systems` that runs at most `run_limit` seconds (None: unknown)
        may start now on the systems the head holds without delaying it."""
        if run_limit is not None and now + run_limit <= self.at:
            return True
        return systems <= self.extra

    def after(self, now: float, run_limit: float | None, systems: int) -> Shadow:
        """The shadow once such a job started: one still running at the shadow time takes
        its systems out of the extra."""
        if run_limit is not None and now + run_limit <= self.at:
            return self
        return dataclasses.replace(self, extra=self.extra - systems)


def shadow_time(
    now: float,
    free: Mapping[str, int],
    kinds: Mapping[str, NodeKind],
    plan: ReplicaPlan,
    releases: Iterable[Release],
) -> float | None:
    """When a head of `plan` would fit, `free` being what is free before it holds anything,
    as the running jobs give back what they hold by their limits; None: not known to (or not
    within MAX_SHADOW_CHECKS tries of its whole plan: the pass's cost stays bounded)."""
    scratch = dict(free)
    kinds = dict(kinds)
    needs = plan.group(Role.CS2).count
    systems = sum(1 for n, f in scratch.items() if f >= 1 and kinds[n] is NodeKind.SYSTEM)
    known = sorted((r for r in releases if r.ends_at is not None), key=_end)
    checks = 0
    for at, release in enumerate(known):
        for node, amount in release.holdings:
            if node in scratch:
                was = scratch[node]
                scratch[node] += amount
                systems += kinds[node] is NodeKind.SYSTEM and was < 1 <= scratch[node]
        following = known[at + 1] if at + 1 < len(known) else None
        if (following is not None and _end(following) <= _end(release)) or systems < needs:
            continue  # they end together (all of it back first), or too few systems yet
        checks += 1
        if checks > MAX_SHADOW_CHECKS:
            return None
        if not fit(plan, scratch, kinds)[1]:
            return max(now, _end(release))
    return None


def shadow_of(now: float, held: int, needs: int, releases: Iterable[Release]) -> Shadow | None:
    """The shadow of a head short only of systems, holding `held` and needing `needs`, given
    when the running jobs give theirs back; None when those it lacks are not known to free
    up."""
    lacking = needs - held
    if lacking <= 0:
        return Shadow(now, held - needs)
    freed = 0
    known = sorted((r for r in releases if r.ends_at is not None), key=_end)
    for at, release in enumerate(known):
        freed += release.systems
        if freed >= lacking:
            end = _end(release)
            freed += sum(r.systems for r in known[at + 1 :] if _end(r) <= end)  # at once too
            return Shadow(max(now, end), freed - lacking)
    return None


def _end(release: Release) -> float:
    assert release.ends_at is not None
    return release.ends_at


def short_only_of_systems(job: QueuedJob, placements: Sequence[Placement]) -> bool:
    """Whether the head placed every replica but some of its CS-2s (what the shadow time of
    backfill by time limits is worked out for)."""
    placed: dict[Role, int] = {}
    for p in placements:
        placed[p.role] = placed.get(p.role, 0) + 1
    return all(
        placed.get(group.role, 0) >= group.count for group in job.plan.groups
        if group.role is not Role.CS2 and group.role in KIND_OF_ROLE
    )  # fmt: skip


def ends_by(now: float, job: QueuedJob, at: float) -> bool:
    """Whether the job, started now, ends by `at` by its time limit."""
    return job.run_limit is not None and now + job.run_limit <= at


def taken(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """What of each node was taken between the two (by node)."""
    return {node: before[node] - free for node, free in after.items() if free < before[node]}


def hold_again(capacity: FreeCapacity, left: dict[str, int], which: Callable[[str], bool]) -> None:
    """Take back for the head what is still free of what it held (`left`, by node, lowered by
    what is taken), on the nodes `which` says."""
    for node, amount in left.items():
        if amount and which(node):
            back = min(amount, max(0, capacity.free[node]))
            capacity.set(node, capacity.free[node] - back)
            left[node] = amount - back
