"""The queue index built at once (as the view builds it from the store) is the index built a
job at a time, and stays so through puts and removes: the same queues, order, positions and
jobs by shape."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.domain.backlog import QueuedJob
from appliance.domain.holds import Hold, HoldKind
from appliance.domain.plan import ReplicaGroup, ReplicaPlan, Role
from appliance.domain.spec import Priority
from appliance.scheduler.backlog_index import BacklogIndex

PLANS = [
    ReplicaPlan((ReplicaGroup(Role.CHIEF, 1), ReplicaGroup(Role.CS2, n, demand=1)), 1 << 20)
    for n in (1, 2, 4)
]


@st.composite
def queued(draw: st.DrawFn) -> list[QueuedJob]:
    jobs = []
    for _ in range(draw(st.integers(0, 40))):
        i = draw(st.integers(0, 30))  # repeated ids: the last entry counts
        jobs.append(
            QueuedJob(
                f"job-{i:02d}",
                draw(st.sampled_from(list(Priority))),
                float(draw(st.integers(0, 5))),
                PLANS[i % len(PLANS)],  # a job's plan never changes
                draw(st.sampled_from(["default", "nlp", "vision"])),
            )
        )
    return jobs


def described(index: BacklogIndex) -> dict[str, object]:
    queues = sorted(index.queues())
    return {
        "len": len(index),
        "order": {q: [j.job_id for j in index.in_order(q)] for q in queues},
        "positions": {
            j.job_id: index.position(j.job_id) for q in queues for j in index.in_order(q)
        },
        "shapes": {
            (q, shape): _of_shape(index, q, shape) for q in queues for shape in index.shapes(q)
        },
    }


def _of_shape(index: BacklogIndex, queue: str, shape: object) -> list[str]:
    found, after = [], None
    while (order := index.next_of_shape(queue, shape, after)) is not None:  # type: ignore[arg-type]
        found.append(index.at(queue, order).job_id)
        after = order
    return found


@settings(max_examples=200, deadline=None)
@given(queued(), queued(), st.lists(st.integers(0, 30), max_size=10))
def test_built_at_once_is_built_one_by_one(
    first: list[QueuedJob], more: list[QueuedJob], removed: list[int]
) -> None:
    at_once, one_by_one = BacklogIndex(first), BacklogIndex()
    for job in first:
        one_by_one.put(job)
    assert described(at_once) == described(one_by_one)
    for index in (at_once, one_by_one):
        for job in more:
            index.put(job)
        for i in removed:
            index.remove(f"job-{i:02d}")
    assert described(at_once) == described(one_by_one)


def test_held_jobs_are_kept_apart_and_keep_their_place() -> None:
    """A hold changes a job's entry in place (its order is the same); released, it is no
    longer among the held."""
    jobs = [QueuedJob(f"job-h{i}", Priority.P2, float(i), PLANS[0]) for i in range(3)]
    held = dataclasses.replace(jobs[1], hold=Hold(HoldKind.USER, "alice"))
    index = BacklogIndex([jobs[0], held, jobs[2]])
    assert [j.job_id for j in index.held()] == [held.job_id]
    assert index.position(held.job_id) == 2
    index.put(jobs[1])  # released
    assert index.held() == [] and index.position(jobs[1].job_id) == 2
    index.put(held)
    assert [j.job_id for j in index.held()] == [held.job_id]
    index.remove(held.job_id)
    assert index.held() == [] and len(index) == 2
