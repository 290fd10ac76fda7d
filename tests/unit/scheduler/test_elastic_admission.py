"""Elastic jobs in the scheduler: admission starts one on the most systems of its range that
fit, a requeued one comes back on what is free then, and the grow policy
(scheduler/admission.py, scheduler/elastic.py)."""

from __future__ import annotations

import dataclasses

from appliance.domain.backlog import QueuedJob, RunningJob
from appliance.domain.plan import Role
from appliance.domain.queues import Quota
from appliance.domain.spec import Priority
from appliance.scheduler.admission import admit
from appliance.scheduler.elastic import to_grow
from appliance.scheduler.quotas import QuotaBook
from tests.unit.scheduler.test_gang_admission import GIB, admitted, job, placed, pool

NOW = 1000.0


def elastic(job_id: str, fewest: int, most: int, **kw: object) -> QueuedJob:
    """A job of `fewest`..`most` systems (one SwarmX port per system)."""
    sizes = [job(job_id, n, **kw).plan for n in range(most, fewest - 1, -1)]  # type: ignore[arg-type]
    entry = job(job_id, fewest, **kw)  # type: ignore[arg-type]
    return dataclasses.replace(
        entry, plan=dataclasses.replace(sizes[-1], larger=tuple(sizes[:-1]))
    )


def sizes(result: object, job_id: str) -> int:
    return len(placed(result, job_id, Role.CS2))  # type: ignore[arg-type]


def test_an_elastic_job_starts_on_the_most_systems_free_in_its_range() -> None:
    result = admit(
        [elastic("e", 2, 8)],
        pool(systems=8, swarmx=(8,), used={"cs2-01": 1, "cs2-02": 1, "cs2-03": 1}),
    )
    assert admitted(result) == ["e"]
    assert sizes(result, "e") == 5


def test_it_takes_its_largest_size_when_the_pool_has_it() -> None:
    result = admit([elastic("e", 2, 4)], pool(systems=8, swarmx=(8,)))
    assert sizes(result, "e") == 4


def test_it_waits_as_a_head_only_for_its_fewest_and_holds_no_more() -> None:
    busy = {f"cs2-{i:02d}": 1 for i in range(1, 8)}  # one of eight free
    result = admit(
        [elastic("e", 2, 8, at=0.0), job("small", 1, at=1.0)],
        pool(systems=8, swarmx=(8,), used=busy),
    )
    assert admitted(result) == []  # the head holds the one free system for itself
    assert result.head is not None and result.head.job_id == "e"
    busy.pop("cs2-07")
    result = admit(
        [elastic("e", 2, 8, at=0.0), job("small", 1, at=1.0)],
        pool(systems=8, swarmx=(8,), used=busy),
    )
    assert admitted(result) == ["e"] and sizes(result, "e") == 2  # shrunk: what is free


def test_a_requeued_elastic_job_comes_back_on_what_is_free_then() -> None:
    busy = {f"cs2-{i:02d}": 1 for i in range(1, 7)}  # a job of higher priority took six
    result = admit([elastic("e", 2, 8)], pool(systems=8, swarmx=(8,), used=busy))
    assert sizes(result, "e") == 2


def test_backfill_behind_a_head_grows_only_on_what_the_head_leaves() -> None:
    head = job("big", 6, at=0.0, priority=Priority.P1)
    busy = {f"cs2-{i:02d}": 1 for i in range(1, 5)}  # four of eight free: the head waits
    result = admit([head, elastic("e", 1, 4, at=1.0)], pool(systems=8, swarmx=(16,), used=busy))
    assert admitted(result) == []  # the head holds all four free systems


def test_a_larger_size_over_the_queues_quota_is_not_taken() -> None:
    book = QuotaBook({"default": Quota(3, 1 << 62), "other": Quota(5, 1 << 62)}, {})
    book.quotas["default"] = Quota(3, 1 << 62, borrow_systems=0)
    result = admit([elastic("e", 2, 8)], pool(systems=8, swarmx=(8,)), book)
    assert sizes(result, "e") == 3


def test_a_larger_size_that_lacks_swarmx_ports_is_not_taken() -> None:
    result = admit([elastic("e", 2, 8)], pool(systems=8, swarmx=(4,)))
    assert sizes(result, "e") == 4  # one port per system, four ports


# ---- the grow policy -----------------------------------------------------------------------


def running(job_id: str, systems: int, fewest: int, most: int, **fields: object) -> RunningJob:
    names = [f"cs2-{i:02d}" for i in range(1, systems + 1)]
    holdings = (*((n, 1) for n in names), ("memx-01", GIB), ("swarmx-01", systems))
    fields.setdefault("checkpointable", True)
    fields.setdefault("scheduled_at", 0.0)
    return RunningJob(
        job_id, Priority.P2, holdings, preemptible=True,
        elastic=elastic(job_id, fewest, most).plan, **fields,  # type: ignore[arg-type]
    )  # fmt: skip


def usage(jobs: list[RunningJob], systems: int = 8, ports: int = 8) -> list:  # type: ignore[type-arg]
    used: dict[str, int] = {}
    for r in jobs:
        for node, amount in r.holdings:
            used[node] = used.get(node, 0) + amount
    return pool(systems=systems, swarmx=(ports,), used=used)


def test_a_shrunk_job_grows_to_the_most_that_idle_systems_allow() -> None:
    jobs = [running("e", 2, 2, 8)]
    growth = to_grow(jobs, usage(jobs), NOW, min_run_seconds=60)
    assert growth is not None and (growth.job.job_id, growth.systems, growth.to) == ("e", 2, 8)


def test_it_grows_only_to_what_fits_with_its_own_systems_back() -> None:
    jobs = [running("e", 2, 2, 8)]
    busy = usage(jobs)
    busy = [
        dataclasses.replace(u, used=1) if u.node.name in {"cs2-07", "cs2-08"} else u for u in busy
    ]
    growth = to_grow(jobs, busy, NOW, min_run_seconds=60)
    assert growth is not None and growth.to == 6


def test_it_never_grows_onto_reserved_systems_it_might_not_be_given() -> None:
    jobs = [running("e", 2, 2, 8)]
    growth = to_grow(jobs, usage(jobs), NOW, 60, reserved={"cs2-07", "cs2-08"})
    assert growth is not None and growth.to == 6
    everything_else = {f"cs2-{i:02d}" for i in range(3, 9)}
    assert to_grow(jobs, usage(jobs), NOW, 60, reserved=everything_else) is None


def test_no_growth_when_nothing_is_idle_at_its_largest_or_it_cannot_checkpoint() -> None:
    at_most = [running("e", 8, 2, 8)]
    assert to_grow(at_most, usage(at_most), NOW, 60) is None
    no_dir = [running("e", 2, 2, 8, checkpointable=False)]
    assert to_grow(no_dir, usage(no_dir), NOW, 60) is None
    fixed = [dataclasses.replace(running("e", 2, 2, 8), elastic=None)]
    assert to_grow(fixed, usage(fixed), NOW, 60) is None


def test_no_growth_before_it_ran_a_while_nor_while_a_job_is_stopping() -> None:
    young = [running("e", 2, 2, 8, scheduled_at=NOW - 10)]
    assert to_grow(young, usage(young), NOW, 60) is None
    jobs = [running("e", 2, 2, 8), dataclasses.replace(running("f", 1, 1, 1), stopping=True)]
    assert to_grow(jobs, usage(jobs), NOW, 60) is None


def test_the_oldest_attempt_grows_first_one_at_a_time() -> None:
    old, new = running("old", 2, 2, 4, scheduled_at=0.0), running("new", 2, 2, 4, scheduled_at=5.0)
    new = dataclasses.replace(new, holdings=(("cs2-03", 1), ("cs2-04", 1), ("swarmx-01", 2)))
    growth = to_grow([new, old], usage([new, old]), NOW, 60)
    assert growth is not None and growth.job.job_id == "old" and growth.to == 4
