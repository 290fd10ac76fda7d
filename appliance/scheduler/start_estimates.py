"""When queued jobs can be expected to start (like `squeue --start`): a pure function of the
systems free now, when each running job gives its systems back, and the queued jobs in order.

The model: every queued job, in order, takes the earliest time from which enough CS-2 systems
stay free for as long as it runs, and holds them that long (every job reserves, none is
delayed by one behind it, as the scheduler's backfill promises). A job whose run time is
unknown holds its systems for good; a running job whose end is unknown never gives its
systems back. So a queued job has no estimate when no such time exists: it needs more
systems than are usable, or what it waits for is held by jobs of unknown end. A reservation's
window (domain/reservations.py) is busy for the jobs it is not for: its systems are not free
to them from its start to its end. MemoryX, SwarmX, quotas and dependencies are left out: it
is an estimate.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Iterable, Sequence


@dataclasses.dataclass(frozen=True)
class Holder:
    """A job holding `systems` usable systems until `ends_at` (None: unknown)."""

    systems: int
    ends_at: float | None


@dataclasses.dataclass(frozen=True)
class Waiting:
    """A queued job needing `systems`, running `seconds` once started (None: unknown);
    `kept_from`: the reservations' windows (by name) it may not use."""

    job_id: str
    systems: int
    seconds: float | None
    kept_from: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True)
class Window:
    """A reservation's `systems` usable systems, busy from `start` to `end` for the jobs it
    is not for."""

    name: str
    start: float
    end: float
    systems: int


def estimate_starts(
    now: float,
    usable: int,
    holders: Iterable[Holder],
    waiting: Sequence[Waiting],
    windows: Sequence[Window] = (),
) -> dict[str, float]:
    """Estimated start times (Unix) of the `waiting` jobs that have one, by job id. `usable`:
    the systems in service; `holders`: the jobs holding some of them; `windows`: the
    reservations' (busy for the jobs kept from them)."""
    holders = list(holders)
    free_now = usable - sum(h.systems for h in holders)
    # The free systems as a step function: free[i] from times[i] to times[i + 1] (or on).
    times, free = [now], [free_now]
    for holder in sorted((h for h in holders if h.ends_at is not None), key=_end):
        at = max(now, _end(holder))
        if at > times[-1]:
            times.append(at)
            free.append(free[-1])
        free[-1] += holder.systems
    for window in windows:
        for at in (window.start, window.end):
            if at > now:
                _split(times, free, at)
    found: dict[str, float] = {}
    for job in waiting:
        kept = [w for w in windows if w.name in job.kept_from]
        open_to = (
            [
                f - sum(w.systems for w in kept if w.start <= t < w.end)
                for t, f in zip(times, free, strict=True)
            ]
            if kept
            else free
        )
        start = _earliest(times, open_to, job.systems, job.seconds)
        if start is None:
            continue
        found[job.job_id] = start
        _reserve(times, free, start, job.seconds, job.systems)
    return found


def _end(holder: Holder) -> float:
    assert holder.ends_at is not None
    return holder.ends_at


def _earliest(
    times: list[float], free: list[int], need: int, seconds: float | None
) -> float | None:
    """The start of the first run of steps with at least `need` free that lasts `seconds`."""
    run_start: int | None = None
    for i, available in enumerate(free):
        if available < need:
            run_start = None
            continue
        if run_start is None:
            run_start = i
        run_end = times[i + 1] if i + 1 < len(times) else math.inf
        if seconds is not None and run_end - times[run_start] >= seconds:
            return times[run_start]
    if run_start is not None:  # the last run lasts for ever
        return times[run_start]
    return None


def _reserve(
    times: list[float], free: list[int], start: float, seconds: float | None, need: int
) -> None:
    end = math.inf if seconds is None else start + seconds
    for at in (start, end):
        if math.isfinite(at):
            _split(times, free, at)
    for i, at in enumerate(times):
        if start <= at < end:
            free[i] -= need


def _split(times: list[float], free: list[int], at: float) -> None:
    """Make `at` the start of a step (the step it falls in, split in two)."""
    i = bisect.bisect_right(times, at) - 1
    if times[i] != at:
        times.insert(i + 1, at)
        free.insert(i + 1, free[i])
