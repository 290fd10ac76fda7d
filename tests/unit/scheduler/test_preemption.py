"""choose_victims(): which running jobs make room for the queue's head, and which never do."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.domain.backlog import QueuedJob, RunningJob
from appliance.domain.inventory import NodeState, NodeUsage
from appliance.domain.spec import Priority
from appliance.scheduler.preemption import (
    PoolFree,
    Room,
    anywhere,
    choose_victims,
    exempt_in_the_way,
)
from tests.unit.scheduler.test_gang_admission import GIB, job, pool

NOW = 1000.0


def running(
    job_id: str,
    systems: Sequence[str],
    priority: Priority = Priority.P3,
    *,
    at_risk: int = 0,
    **fields: object,
) -> RunningJob:
    """A job holding `systems`, 1 GiB of memx-01 and a port of swarmx-01 per system."""
    holdings = (*((s, 1) for s in systems), ("memx-01", GIB), ("swarmx-01", len(systems)))
    fields.setdefault("preemptible", True)
    return RunningJob(job_id, priority, holdings, at_risk=at_risk, **fields)  # type: ignore[arg-type]


def usage_of(
    jobs: Sequence[RunningJob], states: dict[str, NodeState] | None = None
) -> list[NodeUsage]:
    used: dict[str, int] = {}
    for r in jobs:
        for node, amount in r.holdings:
            used[node] = used.get(node, 0) + amount
    return pool(systems=4, memx=(16 * GIB,), swarmx=(8,), used=used, states=states)


def victims(head: QueuedJob, jobs: Sequence[RunningJob], **kw: object) -> list[str] | None:
    chosen = choose_victims(head, jobs, usage_of(jobs, **kw), NOW)  # type: ignore[arg-type]
    return None if chosen is None else [v.job_id for v in chosen.victims]


def test_a_higher_priority_job_preempts_just_enough_lower_priority_work() -> None:
    big = running("wsjob-p3all", ["cs2-01", "cs2-02", "cs2-03", "cs2-04"])
    assert victims(job("wsjob-p1", 2, priority=Priority.P1), [big]) == ["wsjob-p3all"]


def test_equal_or_higher_priority_work_is_never_preempted() -> None:
    jobs = [
        running("wsjob-p1a", ["cs2-01", "cs2-02"], Priority.P1),
        running("wsjob-p2a", ["cs2-03", "cs2-04"], Priority.P2),
    ]
    assert victims(job("wsjob-head", 2, priority=Priority.P2), jobs) is None
    assert victims(job("wsjob-head", 2, priority=Priority.P1), jobs) == ["wsjob-p2a"]


def test_the_lowest_priority_then_the_least_work_since_a_checkpoint_goes_first() -> None:
    jobs = [
        running("wsjob-p2", ["cs2-01"], Priority.P2),
        running("wsjob-p3-much", ["cs2-02"], at_risk=500),
        running("wsjob-p3-little", ["cs2-03"], at_risk=5),
        running("wsjob-p3-more", ["cs2-04"], at_risk=50),
    ]
    assert victims(job("wsjob-head", 1, priority=Priority.P1), jobs) == ["wsjob-p3-little"]
    assert victims(job("wsjob-head", 2, priority=Priority.P1), jobs) == [
        "wsjob-p3-little",
        "wsjob-p3-more",
    ]
    assert victims(job("wsjob-head", 4, priority=Priority.P1), jobs) == [
        "wsjob-p3-little",
        "wsjob-p3-more",
        "wsjob-p3-much",
        "wsjob-p2",
    ]


def test_the_fewest_jobs_are_stopped() -> None:
    """Greedy order would take the two small jobs first; the one that holds two systems alone
    makes room, so the small ones are handed back."""
    jobs = [
        running("wsjob-small1", ["cs2-01"], at_risk=1),
        running("wsjob-small2", ["cs2-02"], at_risk=2),
        running("wsjob-pair", ["cs2-03", "cs2-04"], at_risk=3),
    ]
    assert victims(job("wsjob-head", 2, priority=Priority.P1), jobs) == ["wsjob-pair"]


def test_nothing_is_preempted_when_the_head_would_still_not_fit() -> None:
    jobs = [
        running("wsjob-p1", ["cs2-01", "cs2-02"], Priority.P1),
        running("wsjob-p3", ["cs2-03", "cs2-04"]),
    ]
    assert victims(job("wsjob-head", 3, priority=Priority.P1), jobs) is None
    # A system out of service gives nothing back.
    alone = [running("wsjob-p3", ["cs2-01", "cs2-02"])]
    broken = {"cs2-02": NodeState.ERROR, "cs2-03": NodeState.ERROR}
    assert victims(job("wsjob-head", 3, priority=Priority.P1), alone, states=broken) is None


def test_opted_out_and_recently_preempted_jobs_are_left_alone() -> None:
    head = job("wsjob-head", 2, priority=Priority.P1)
    exempt = running("wsjob-exempt", ["cs2-01", "cs2-02", "cs2-03", "cs2-04"], preemptible=False)
    assert victims(head, [exempt]) is None
    fresh = running("wsjob-fresh", ["cs2-01", "cs2-02", "cs2-03", "cs2-04"],
                    protected_until=NOW + 1)  # fmt: skip
    assert victims(head, [fresh]) is None
    due = running("wsjob-due", ["cs2-01", "cs2-02", "cs2-03", "cs2-04"], protected_until=NOW)
    assert victims(head, [due]) == ["wsjob-due"]


def test_a_head_waits_for_jobs_already_stopping_instead_of_choosing_more() -> None:
    head = job("wsjob-head", 2, priority=Priority.P1)
    jobs = [
        running("wsjob-going", ["cs2-01", "cs2-02"], stopping=True, preempted_by="wsjob-head"),
        running("wsjob-stays", ["cs2-03", "cs2-04"]),
    ]
    chosen = choose_victims(head, jobs, usage_of(jobs), NOW)
    assert chosen is not None and chosen.victims == ()
    assert [w.job_id for w in chosen.waiting_for] == ["wsjob-going"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(list(Priority)), st.integers(1, 2), st.integers(0, 100)),
        max_size=4,
    ),
    st.sampled_from(list(Priority)),
    st.integers(1, 4),
)
def test_victims_always_make_room_and_are_all_strictly_lower_priority(
    specs: list[tuple[Priority, int, int]], head_priority: Priority, wanted: int
) -> None:
    jobs, free = [], [f"cs2-{i:02d}" for i in range(1, 5)]
    for n, (priority, size, risk) in enumerate(specs):
        if len(free) < size:
            break
        held, free = free[:size], free[size:]
        jobs.append(running(f"wsjob-r{n}", held, priority, at_risk=risk))
    head = job("wsjob-head", wanted, priority=head_priority)
    chosen = choose_victims(head, jobs, usage_of(jobs), NOW)
    lower = [r for r in jobs if int(r.priority) > int(head_priority)]
    room = len(free) + sum(len(r.holdings) - 2 for r in lower)
    if wanted <= len(free) or room < wanted:
        assert chosen is None  # no need, or no way
        return
    assert chosen is not None
    assert all(int(v.priority) > int(head_priority) for v in chosen.victims)
    freed = len(free) + sum(len(v.holdings) - 2 for v in chosen.victims)
    assert freed >= wanted
    # Minimal: handing back any one victim leaves the head short.
    for v in chosen.victims:
        assert freed - (len(v.holdings) - 2) < wanted


def test_the_exempt_jobs_a_head_waits_on_are_named_with_until_when() -> None:
    head = job("wsjob-head", 4, priority=Priority.P1)
    fresh = running("wsjob-fresh", ["cs2-01", "cs2-02"], protected_until=NOW + 30)
    kept = running("wsjob-kept", ["cs2-03", "cs2-04"], preemptible=False)
    jobs = [fresh, kept]
    assert choose_victims(head, jobs, usage_of(jobs), NOW) is None
    named = exempt_in_the_way(head, jobs, usage_of(jobs), NOW)
    assert sorted(named) == [("wsjob-fresh", NOW + 30), ("wsjob-kept", 0.0)]
    assert exempt_in_the_way(head, [kept], usage_of([kept]), NOW) == (("wsjob-kept", 0.0),)
    # Not what keeps it waiting: the head would not fit even with both gone.
    assert (
        exempt_in_the_way(job("wsjob-big", 5, priority=Priority.P1), jobs, usage_of(jobs), NOW)
        == ()
    )


def _exempt_reference(
    head: QueuedJob, jobs: Sequence[RunningJob], usage: Sequence[NodeUsage], room: Room
) -> tuple[tuple[str, float], ...]:
    """The search as it was before `exempt_in_the_way` learned to skip it: every job of lower
    priority made fair game, whatever its queue."""
    freed = [
        dataclasses.replace(r, preemptible=True, protected_until=0.0)
        if int(r.priority) > int(head.priority) and not r.stopping
        else r
        for r in jobs
    ]
    chosen = choose_victims(head, freed, usage, NOW, room=room)
    if chosen is None or not chosen.victims:
        return ()
    exempt = {r.job_id: r for r in jobs if not r.preemptible or r.protected_until > NOW}
    return tuple(
        (v.job_id, exempt[v.job_id].protected_until if exempt[v.job_id].preemptible else 0.0)
        for v in chosen.victims
        if v.job_id in exempt
    )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(list(Priority)),
            st.integers(1, 2),
            st.sampled_from(["default", "other"]),
            st.booleans(),  # preemptible
            st.sampled_from([0.0, NOW, NOW + 5]),  # protected until
            st.booleans(),  # stopping
        ),
        max_size=4,
    ),
    st.sampled_from(list(Priority)),
    st.integers(1, 4),
    st.sets(st.sampled_from(["cs2-01", "cs2-02", "cs2-03", "cs2-04"]), max_size=2),
    st.sampled_from([1, 12, 15]),  # the head's MemoryX GiB: 16 on the pool, 1 per job held
    st.sampled_from(["anywhere", "two at most", "only the other queue"]),
)
def test_the_pool_made_once_per_pass_decides_as_the_pool_itself(
    specs: list[tuple[Priority, int, str, bool, float, bool]],
    head_priority: Priority,
    wanted: int,
    broken: set[str],
    memx_gib: int,
    rule: str,
) -> None:
    jobs, free = [], [f"cs2-{i:02d}" for i in range(1, 5)]
    for n, (priority, size, queue, preemptible, until, stopping) in enumerate(specs):
        if len(free) < size:
            break
        held, free = free[:size], free[size:]
        jobs.append(
            running(f"wsjob-r{n}", held, priority, queue=queue, preemptible=preemptible,
                    protected_until=until, stopping=stopping)
        )  # fmt: skip
    head = job("wsjob-head", wanted, priority=head_priority, memx_bytes=memx_gib * GIB)
    usage = usage_of(jobs, states=dict.fromkeys(broken, NodeState.ERROR))
    view = PoolFree.of(usage)
    room = ROOMS[rule]
    assert choose_victims(head, jobs, view, NOW, room=room) == choose_victims(
        head, jobs, usage, NOW, room=room
    )
    assert exempt_in_the_way(head, jobs, view, NOW, room) == _exempt_reference(
        head, jobs, usage, room
    )


ROOMS: dict[str, Room] = {
    "anywhere": anywhere,
    "two at most": lambda victims: len(victims) <= 2,
    "only the other queue": lambda victims: all(v.queue == "other" for v in victims),
}
