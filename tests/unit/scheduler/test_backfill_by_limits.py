"""Backfill by time limits (EASY, as Slurm's), on admission's pure function: a head short of
systems gets a shadow time from the running jobs' limits; a short job behind it starts on the
systems it holds when it ends by then, a long one does not, and neither delays the head."""

from __future__ import annotations

import dataclasses

from appliance.domain.backlog import QueuedJob, Release
from appliance.domain.spec import Priority
from appliance.scheduler.admission import admit_backlog
from appliance.scheduler.backfill import Shadow, shadow_of, shadow_time
from appliance.scheduler.backlog_index import BacklogIndex
from tests.unit.scheduler.test_gang_admission import GIB, admitted, job, pool

# 8 systems; three running jobs of 2 systems each end by their limits at 100, 200 and 300.
RUNNING = [
    Release(2, end, ((f"cs2-{2 * n + 1:02d}", 1), (f"cs2-{2 * n + 2:02d}", 1)))
    for n, end in enumerate((100.0, 200.0, 300.0))
]
USED = {f"cs2-{i:02d}": 1 for i in range(1, 7)}


def _pool() -> list:  # type: ignore[type-arg]
    return pool(8, memx=(64 * GIB,), swarmx=(8, 8, 8), used=USED)


def limited(job_id: str, systems: int, limit: float | None, at: float) -> QueuedJob:
    return dataclasses.replace(job(job_id, systems, at=at), run_limit=limit)


def _queue() -> list[QueuedJob]:
    return [
        dataclasses.replace(job("head", 4, priority=Priority.P1), run_limit=1000.0),
        limited("long", 2, 500.0, 1),  # would still run at the head's shadow time (100)
        limited("unbounded", 2, None, 2),  # no limit: cannot be shown to end in time
        limited("short", 2, 50.0, 3),  # ends by 100: fills the gap
    ]


def test_the_shadow_time_is_when_enough_systems_free_up() -> None:
    assert shadow_of(0.0, 2, 4, RUNNING) == Shadow(100.0, 0)
    assert shadow_of(0.0, 2, 6, RUNNING) == Shadow(200.0, 0)
    assert shadow_of(0.0, 2, 5, RUNNING) == Shadow(200.0, 1)
    assert shadow_of(0.0, 2, 4, [Release(2, None), *RUNNING[1:]]) == Shadow(200.0, 0)
    free = {u.node.name: u.free for u in _pool()}
    kinds = {u.node.name: u.node.kind for u in _pool()}
    head = job("head", 4)
    assert shadow_time(0.0, free, kinds, head.plan, RUNNING) == 100.0
    assert shadow_time(0.0, free, kinds, job("head", 6).plan, RUNNING) == 200.0
    assert shadow_time(0.0, free, kinds, head.plan, RUNNING[1:]) == 200.0
    assert shadow_time(0.0, free, kinds, job("head", 9).plan, RUNNING) is None
    assert shadow_of(0.0, 2, 4, [Release(6, None)]) is None  # unknown: no backfill by limits
    assert shadow_of(500.0, 2, 4, RUNNING) == Shadow(500.0, 0)  # overdue: at once
    assert Shadow(100.0, 0).allows(0.0, 100.0, 8) and not Shadow(100.0, 0).allows(0.0, 101, 2)
    assert Shadow(100.0, 2).allows(0.0, None, 2) and not Shadow(100.0, 1).allows(0.0, None, 2)


def test_a_short_job_fills_the_gap_a_long_one_would_not_fit() -> None:
    queue = _queue()
    without = admit_backlog(BacklogIndex(queue), _pool())
    assert admitted(without) == []  # the head holds the 2 free systems: nothing backfills
    with_limits = admit_backlog(BacklogIndex(queue), _pool(), releases=RUNNING, now=0.0)
    assert admitted(with_limits) == ["short"]
    assert with_limits.head is not None and with_limits.head.job_id == "head"
    # The head still starts at 100: short gave its systems back by then.
    assert "behind head" in (with_limits.reason("long") or "")


def test_unknown_ends_keep_the_head_hold() -> None:
    unknown = [Release(2, None), Release(2, None), Release(2, None)]
    decision = admit_backlog(BacklogIndex(_queue()), _pool(), releases=unknown, now=0.0)
    assert admitted(decision) == []


def test_a_job_may_take_what_the_head_will_not_need_then() -> None:
    """The head needs 3: at 100 it has 2 + 2 freed, one spare: a 1-system job of no limit may
    run on it; a second such job may not."""
    queue = [
        dataclasses.replace(job("head", 3, priority=Priority.P1), run_limit=1000.0),
        limited("one", 1, None, 1),
        limited("two", 1, None, 2),
    ]
    decision = admit_backlog(BacklogIndex(queue), _pool(), releases=RUNNING, now=0.0)
    assert admitted(decision) == ["one"]


def test_jobs_started_by_the_pass_count_towards_the_shadow() -> None:
    """Two free systems, a 2-system job of limit 40 admitted first (before the head, by
    priority), then the head needs 4: its shadow is 40 (that job) + the one at 100."""
    queue = [
        limited("first", 2, 40.0, 0),
        dataclasses.replace(job("head", 4, at=1), run_limit=1000.0),
        limited("fits-40", 2, 40.0, 2),
        limited("fits-100", 2, 100.0, 3),
    ]
    free4 = {f"cs2-{i:02d}": 1 for i in range(1, 5)}
    decision = admit_backlog(
        BacklogIndex(queue), pool(8, memx=(64 * GIB,), swarmx=(8, 8, 8), used=free4),
        releases=RUNNING[:2], now=0.0,
    )  # fmt: skip
    # Head holds 2 and lacks 2: `first` frees 2 at 40, so its shadow is 40: only fits-40.
    assert admitted(decision) == ["first", "fits-40"]


def test_a_head_short_of_swarmx_ports_too_has_a_shadow_time() -> None:
    """A running job holds 2 systems and 2 of the 4 SwarmX ports until 100: the head (3
    systems, 3 ports) lacks both; a 1-system job ending by 100 fills the gap, a longer one
    does not (no extra is counted beyond systems)."""
    holdings = (("cs2-01", 1), ("cs2-02", 1), ("swarmx-01", 2))
    used = {"cs2-01": 1, "cs2-02": 1, "swarmx-01": 2}
    usage = pool(4, memx=(64 * GIB,), swarmx=(4,), used=used)
    queue = [
        dataclasses.replace(job("head", 3, priority=Priority.P1), run_limit=1000.0),
        limited("long", 1, 500.0, 1),
        limited("short", 1, 50.0, 2),
    ]
    decision = admit_backlog(
        BacklogIndex(queue), usage, releases=[Release(2, 100.0, holdings)], now=0.0
    )
    assert admitted(decision) == ["short"]
    assert admitted(admit_backlog(BacklogIndex(queue), usage)) == []
