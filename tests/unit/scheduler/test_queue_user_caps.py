"""A queue's caps per user in admission (#37; Slurm's MaxJobsPerUser and MaxTRESPerUser on a
QOS), pure: a job over its queue's cap of running jobs or systems for its user waits with a
code naming the cap, is stepped over (never a head), and what the pass admits counts at once;
other queues and other users go on."""

from __future__ import annotations

import dataclasses

from appliance.domain.backlog import QueuedJob
from appliance.domain.reasons import ReasonCode
from appliance.scheduler.admission import admit_backlog
from appliance.scheduler.backlog_index import BacklogIndex
from appliance.scheduler.user_caps import Holding, QueueUserCaps, UserCaps
from tests.unit.scheduler.test_gang_admission import admitted, job, pool


def of(user: str, queued: QueuedJob, queue: str = "default") -> QueuedJob:
    return dataclasses.replace(queued, user=user, queue=queue)


def caps(
    queue_caps: dict[str, QueueUserCaps], in_queues: dict[tuple[str, str], Holding] | None = None
) -> UserCaps:
    return UserCaps({}, None, queue_caps, in_queues)


def test_a_user_at_the_queues_cap_of_running_jobs_is_stepped_over() -> None:
    queue = [
        of("alice", job("a1", 1, at=1)),
        of("alice", job("a2", 1, at=2)),
        of("bob", job("b1", 1, at=3)),
    ]
    users = caps({"default": QueueUserCaps(running_jobs=1)})
    decision = admit_backlog(BacklogIndex(queue), pool(4), users=users)
    assert admitted(decision) == ["a1", "b1"]
    why = decision.why("a2")
    assert why is not None and why.code is ReasonCode.QUEUE_USER_JOBS
    assert "alice has 1 of their 1 jobs running in queue default" in why.message
    assert decision.heads == ()  # it holds nothing back


def test_what_a_user_holds_in_the_queue_counts_against_its_cap_of_systems() -> None:
    queue = [of("alice", job("a2", 2, at=1)), of("alice", job("a1", 1, at=2))]
    users = caps(
        {"default": QueueUserCaps(systems=2)}, {("default", "alice"): Holding(jobs=1, systems=1)}
    )
    decision = admit_backlog(BacklogIndex(queue), pool(4), users=users)
    assert admitted(decision) == ["a1"]  # 1 + 1 fits the cap of 2; 1 + 2 does not
    why = decision.why("a2")
    assert why is not None and why.code is ReasonCode.QUEUE_USER_SYSTEMS
    assert "hold 1 of their 2 systems (max_systems_per_user); it needs 2" in why.message


def test_a_cap_of_another_queue_or_none_changes_nothing() -> None:
    queue = [of("alice", job(f"a{i}", 1, at=i)) for i in range(3)]
    users = caps({"nlp": QueueUserCaps(running_jobs=0, systems=0)})
    assert admitted(admit_backlog(BacklogIndex(queue), pool(4), users=users)) == [
        "a0", "a1", "a2",
    ]  # fmt: skip
    none = caps({"default": QueueUserCaps()})
    assert len(admitted(admit_backlog(BacklogIndex(queue), pool(4), users=none))) == 3


def test_the_cluster_cap_and_the_queues_cap_both_hold() -> None:
    queue = [of("alice", job("a1", 1, at=1)), of("alice", job("a2", 1, at=2))]
    users = UserCaps({"alice": 3}, lambda user, groups: 4, {"default": QueueUserCaps(2, None)})
    decision = admit_backlog(BacklogIndex(queue), pool(4), users=users)
    assert admitted(decision) == ["a1"]  # the cluster's cap (3 + 1 of 4) first
    why = decision.why("a2")
    assert why is not None and why.code is ReasonCode.USER_SYSTEMS
