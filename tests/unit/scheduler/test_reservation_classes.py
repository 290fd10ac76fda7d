"""Admission around reservations (scheduler/reservations.py): which nodes a job may not use,
the classes jobs fall into, and the pass over them."""

from __future__ import annotations

import dataclasses

from appliance.domain.backlog import QueuedJob
from appliance.domain.plan import Role
from appliance.domain.reasons import ReasonCode
from appliance.domain.reservations import Reservation
from appliance.scheduler.admission import Admission
from appliance.scheduler.backlog_index import BacklogIndex
from appliance.scheduler.reservations import admit_around, blocked_for, classes
from tests.unit.scheduler.test_gang_admission import job, pool

NOW = 1000.0
# cs2-01 and cs2-02 down for maintenance from NOW + 100 for an hour.
MAINT = Reservation("maint", NOW + 100, NOW + 3700, ("cs2-01", "cs2-02"), maint=True)
# cs2-04 reserved for alice now.
ALICE = Reservation("alice", NOW - 10, NOW + 1000, ("cs2-04",), users=("alice",))


def limited(
    job_id: str, systems: int, limit: float | None, user: str = "bob", at: float = 0.0
) -> QueuedJob:
    return dataclasses.replace(job(job_id, systems, at=at), run_limit=limit, user=user)


def systems_of(result: object, job_id: str) -> list[str]:
    [decision] = [d for d in result.admitted if d.job_id == job_id]  # type: ignore[attr-defined]
    return [p.node for p in decision.placements if p.role is Role.CS2]


def test_a_node_is_blocked_when_a_window_not_the_jobs_meets_its_limit() -> None:
    assert blocked_for(limited("short", 1, 50.0), [MAINT], NOW)[0] == frozenset()
    assert blocked_for(limited("long", 1, 500.0), [MAINT], NOW)[0] == set(MAINT.nodes)


def test_classes_hold_reservations_first_and_one_class_without_any() -> None:
    jobs = [limited("a", 1, 50.0), limited("b", 1, None), limited("c", 1, 10.0, user="alice")]
    found = classes(jobs, [MAINT, ALICE], NOW)
    assert [sorted(c.job_ids) for c in found] == [["c"], ["a"], ["b"]]
    assert found[0].first == frozenset({"cs2-04"}) and found[0].blocked == frozenset()
    assert found[2].blocked == frozenset({"cs2-01", "cs2-02", "cs2-04"}) and found[2].maint
    assert len(classes(jobs, [], NOW)) == 1


def test_with_no_reservation_the_pass_is_admissions_own() -> None:
    index = BacklogIndex([limited("a", 1, None)])
    assert isinstance(admit_around(index, pool(4), [], NOW), Admission)
    ended = dataclasses.replace(MAINT, start=0.0, end=NOW)
    assert isinstance(admit_around(index, pool(4), [ended], NOW), Admission)


def test_a_job_running_into_maintenance_goes_elsewhere_or_waits() -> None:
    queue = [limited("long", 2, 500.0, at=1), limited("short", 1, 50.0, at=2)]
    result = admit_around(BacklogIndex(queue), pool(4), [MAINT], NOW)
    assert systems_of(result, "long") == ["cs2-03", "cs2-04"]  # not into the window
    assert systems_of(result, "short") == ["cs2-01"]  # ends before it
    waiting = [limited("big", 3, 500.0)]
    result = admit_around(BacklogIndex(waiting), pool(4), [MAINT], NOW)
    assert result.admitted == []
    why = result.why("big")
    assert why is not None and why.code is ReasonCode.RESERVATION
    assert why.message.startswith("ReqNodeNotAvail, Reserved for maintenance (maint)")


def test_a_user_reservation_is_used_first_by_its_user_and_not_by_others() -> None:
    queue = [limited("bobs", 4, None, at=1), limited("alices", 1, None, user="alice", at=2)]
    result = admit_around(BacklogIndex(queue), pool(4), [ALICE], NOW)
    assert systems_of(result, "alices") == ["cs2-04"]  # its reserved system first
    why = result.why("bobs")  # three systems are not enough for bob
    assert why is not None and why.code is ReasonCode.RESERVATION
    assert why.message.startswith("Reserved for others (alice); with no time limit")
    others = [limited("bobs", 1, None, at=1), limited("carols", 2, None, user="carol", at=2)]
    result = admit_around(BacklogIndex(others), pool(4), [ALICE], NOW)
    assert systems_of(result, "bobs") == ["cs2-01"]
    assert systems_of(result, "carols") == ["cs2-02", "cs2-03"]  # cs2-04 waits for alice


def test_the_limit_of_admissions_holds_across_classes() -> None:
    queue = [limited("alices", 1, None, user="alice"), limited("bobs", 1, None, at=1)]
    result = admit_around(BacklogIndex(queue), pool(4), [ALICE], NOW, limit=1)
    assert [d.job_id for d in result.admitted] == ["alices"] and result.capped


def test_the_reason_names_maintenance_and_others_reservations_apart() -> None:
    waiting = [limited("big", 4, 500.0)]
    result = admit_around(BacklogIndex(waiting), pool(4), [MAINT, ALICE], NOW)
    why = result.why("big")
    assert why is not None and why.code is ReasonCode.RESERVATION
    assert why.message.startswith(
        "ReqNodeNotAvail, Reserved for maintenance (maint) and for others (alice) "
        "before it would end by its time limit"
    )
