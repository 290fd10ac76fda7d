"""The per-user cap of running systems in admission (MaxTRESPerUser, #36): a job that would take
its user over the cap waits saying so, is stepped over (never the head), and counts what the
same pass admits."""

from __future__ import annotations

import dataclasses

from appliance.domain.backlog import QueuedJob
from appliance.domain.reasons import ReasonCode
from appliance.domain.spec import Priority
from appliance.scheduler.admission import admit_backlog
from appliance.scheduler.backlog_index import BacklogIndex
from appliance.scheduler.user_caps import UserCaps
from tests.unit.scheduler.test_gang_admission import GIB, admitted, job, pool


def of(user: str, queued: QueuedJob, groups: tuple[str, ...] = ()) -> QueuedJob:
    return dataclasses.replace(queued, user=user, groups=groups)


def caps(held: dict[str, int], cap: dict[str, int]) -> UserCaps:
    return UserCaps(held, lambda user, groups: cap.get(user))


def test_a_user_at_their_cap_waits_and_others_go_on() -> None:
    queue = [
        of("alice", job("a1", 1, at=1)),
        of("alice", job("a2", 1, at=2)),
        of("alice", job("a3", 1, at=3)),
        of("bob", job("b1", 1, at=4)),
    ]
    decision = admit_backlog(BacklogIndex(queue), pool(4), users=caps({}, {"alice": 2}))
    assert admitted(decision) == ["a1", "a2", "b1"]
    why = decision.why("a3")
    assert why is not None and why.code is ReasonCode.USER_SYSTEMS
    assert "alice's running jobs hold 2 of their 2 systems" in why.message
    assert decision.heads == ()  # stepped over: it holds nothing back


def test_what_a_user_holds_already_counts_and_backfill_steps_over_their_jobs() -> None:
    # The head waits for MemoryX and holds 2 systems; alice holds 1 of her 1 already: her job
    # behind the head, which would fit, is stepped over; bob's is admitted.
    queue = [
        of("carol", job("c2", 2, priority=Priority.P1, memx_bytes=32 * GIB)),
        of("alice", job("a1", 1, at=1)),
        of("bob", job("b1", 1, at=2)),
    ]
    decision = admit_backlog(BacklogIndex(queue), pool(4), users=caps({"alice": 1}, {"alice": 1}))
    assert [h.job.job_id for h in decision.heads] == ["c2"]
    assert admitted(decision) == ["b1"]
    why = decision.why("a1")
    assert why is not None and why.code is ReasonCode.USER_SYSTEMS
    assert "it needs 1 and starts when theirs end" in why.message


def test_without_caps_nothing_changes() -> None:
    queue = [of("alice", job(f"a{i}", 1, at=i)) for i in range(3)]
    assert admitted(admit_backlog(BacklogIndex(queue), pool(4))) == ["a0", "a1", "a2"]
    unlimited = caps({"alice": 7}, {})
    assert admitted(admit_backlog(BacklogIndex(queue), pool(4), users=unlimited)) == [
        "a0",
        "a1",
        "a2",
    ]


def test_the_cap_comes_from_the_jobs_groups() -> None:
    by_group = UserCaps({}, lambda user, groups: 1 if "small" in groups else None)
    queue = [
        of("alice", job("a1", 1, at=1), ("small",)),
        of("alice", job("a2", 1, at=2), ("small",)),
    ]
    decision = admit_backlog(BacklogIndex(queue), pool(4), users=by_group)
    assert admitted(decision) == ["a1"]
    assert decision.pending_reasons["a2"].code is ReasonCode.USER_SYSTEMS
