"""Backfill by time limits (EASY backfill, as Slurm's): a pure decision on when a blocked head
could start and which job behind it may start now without delaying it.

A queue's head that lacks only CS-2 systems holds the free ones. Its *shadow time* is when
enough systems free up for it: the running jobs' ends by their time limits (start plus limit;
a job without a limit never ends as far as this knows), earliest first, until the systems it
holds and those freed add up to what it needs. A job behind it may then start at once on the
systems the head holds if it fits in them and either its own limit ends by the shadow time
(the systems are back before the head could use them), or it takes only systems the head will
not need at the shadow time (the *extra*: what is free then beyond the head's need). Either way
the head starts no later than it would without it. With no shadow time (a job it waits for has
no limit) nothing backfills this way: the head's hold stands, as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from appliance.domain.backlog import Release

# Jobs behind a head one pass looks at for backfill by time limits (Slurm's bf_max_job_test):
# the pass's cost stays bounded however long the queue.
MAX_BACKFILL_TESTS = 256


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


def shadow_of(now: float, held: int, needs: int, releases: Iterable[Release]) -> Shadow | None:
    """The shadow of a head that holds `held` systems and needs `needs`, given when the
    running jobs give theirs back; None when the systems it lacks are not known to free up."""
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
