"""The JobStore contract for usage accounting: per user, group or queue over a window, what
the attempts held (systems and MemoryX bytes times their hold inside the window, a current one
up to now), the jobs that ended in it by final phase, the queue waits of the attempts scheduled
in it (nearest-rank p50 and p95), and the preemptions and restarts that ended an attempt in
it. Every number below is worked out by hand from one scripted workload. Run against every
backend."""

from __future__ import annotations

import dataclasses

import pytest

from appliance.domain.inventory import default_pool
from appliance.domain.phases import Phase
from appliance.domain.plan import Role, plan_replicas
from appliance.domain.spec import validate_spec
from appliance.domain.usage import UsageBy, UsageQuery, UsageRow
from appliance.store.jobs import JobStore, NewJob
from tests.integration.store.driving import PARAMS, T0, define_queues, placements_for

H = 3600.0
GIB = 2**30
MX = 610_680  # the MemoryX bytes every job of the workload holds (its model's size)
NOW = T0 + 4 * H + 40  # when the workload's reports are asked for


def _submit(
    store: JobStore, job_id: str, user: str, groups: tuple[str, ...], queue: str, *,
    num_csx: int, at: float,
) -> None:  # fmt: skip
    spec = validate_spec(params_yaml=PARAMS, num_csx=num_csx, num_steps=100, queue=queue)
    plan = plan_replicas(spec, default_pool())
    assert sum(g.demand * g.count for g in plan.groups if g.role is Role.MEMORYX) == MX
    store.create_jobs([NewJob(job_id, user, spec, plan, groups=groups)], at)


def _run(store: JobStore, job_id: str, at: float) -> None:
    """Schedule the queued job at `at` and bring it to RUNNING."""
    assert store.schedule(job_id, placements_for(store, job_id), at).applied
    for phase in (Phase.INITIALIZING, Phase.RUNNING):
        assert store.set_phase(job_id, phase, "on", at).applied


def _end(store: JobStore, job_id: str, phase: Phase, at: float) -> None:
    assert store.set_phase(job_id, phase, f"to {phase}", at).applied


@pytest.fixture
def workload(store: JobStore) -> JobStore:
    """On the 4 systems, times in seconds after T0 (H: an hour):

    alice (group nlp-team, queue nlp)
      a1, 2 systems: submitted 0; scheduled 10 (waited 10); preempted by b1 at 10+H; scheduled
          again 40+H (waited 30); SUCCEEDED 40+3H.
      a2, 1 system: submitted 0; scheduled 20 (waited 20); restarted at 20+H/4; scheduled
          again 80+H/4 (waited 60); CANCELLED 80+3H/4.
    bob (group vision-team, queue vision)
      b1, 2 systems: submitted 100; scheduled 10+H (waited H-90); FAILED 10+2H.
      b2, 1 system: submitted 2H; scheduled 2H+40 (waited 40); still RUNNING at NOW (4H+40).
    carol (no group, queue nlp)
      c1, 1 system: submitted 50; CANCELLED 100 while queued (never held anything).
    """
    define_queues(store, "nlp", "vision")
    alice, bob = ("alice", ("nlp-team", "all"), "nlp"), ("bob", ("vision-team",), "vision")
    _submit(store, "wsjob-a1", *alice, num_csx=2, at=T0)
    _submit(store, "wsjob-a2", *alice, num_csx=1, at=T0)
    _run(store, "wsjob-a1", T0 + 10)
    _run(store, "wsjob-a2", T0 + 20)
    _submit(store, "wsjob-c1", "carol", (), "nlp", num_csx=1, at=T0 + 50)
    _submit(store, "wsjob-b1", *bob, num_csx=2, at=T0 + 100)
    _end(store, "wsjob-c1", Phase.CANCELLED, T0 + 100)
    _end(store, "wsjob-a2", Phase.QUEUED, T0 + 20 + H / 4)  # a restart: nobody preempted it
    _run(store, "wsjob-a2", T0 + 80 + H / 4)
    _end(store, "wsjob-a2", Phase.CANCELLED, T0 + 80 + 3 * H / 4)
    written, _ = store.request_requeue(
        "wsjob-a1", 1, "preempted by wsjob-b1 (P1)", T0 + 10 + H, preempted_by="wsjob-b1"
    )
    assert written
    assert store.requeue_now("wsjob-a1", 1, "preempted by wsjob-b1 (P1)", T0 + 10 + H)
    _run(store, "wsjob-b1", T0 + 10 + H)
    _run(store, "wsjob-a1", T0 + 40 + H)
    _end(store, "wsjob-b1", Phase.FAILED, T0 + 10 + 2 * H)
    _submit(store, "wsjob-b2", *bob, num_csx=1, at=T0 + 2 * H)
    _run(store, "wsjob-b2", T0 + 2 * H + 40)
    _end(store, "wsjob-a1", Phase.SUCCEEDED, T0 + 40 + 3 * H)
    return store


# The whole workload, [T0, NOW). alice: a1 held 2 systems for 1 h then 2 h, a2 1 system for
# H/4 then H/2; each attempt one job's MemoryX bytes. Her waits 10, 20, 30, 60: p50 is the
# 2nd (ceil(0.5 x 4)), p95 the 4th (ceil(0.95 x 4)).
ALICE = UsageRow(
    "alice", system_hours=2 * 1 + 2 * 2 + 1 * 0.25 + 1 * 0.5,
    memoryx_gib_hours=MX / GIB * (1 + 2 + 0.25 + 0.5), succeeded=1, cancelled=1,
    wait_p50_seconds=20, wait_p95_seconds=60, preemptions=1, restarts=1, attempts=4,
)  # fmt: skip
# bob: b1 2 systems for 1 h, b2 1 system from 2H+40 to NOW (2 h, still running). Waits 40 and
# H-90: p50 the 1st (ceil(0.5 x 2)), p95 the 2nd (ceil(0.95 x 2)).
BOB = UsageRow(
    "bob", system_hours=2 * 1 + 1 * 2, memoryx_gib_hours=MX / GIB * (1 + 2), failed=1,
    wait_p50_seconds=40, wait_p95_seconds=H - 90, attempts=2,
)  # fmt: skip
CAROL = UsageRow("carol", cancelled=1)  # cancelled while queued: no usage, no wait


def _usage(store: JobStore, since: float, until: float, by: UsageBy) -> list[UsageRow]:
    return store.usage(UsageQuery(since, until, by), NOW)


def _approx(rows: list[UsageRow]) -> list[UsageRow]:
    """The rows with their hours compared to within float rounding."""
    return [
        UsageRow(
            r.key, pytest.approx(r.system_hours), pytest.approx(r.memoryx_gib_hours),  # type: ignore[arg-type]
            r.succeeded, r.failed, r.cancelled, r.wait_p50_seconds, r.wait_p95_seconds,
            r.preemptions, r.restarts, r.attempts,
        )
        for r in rows
    ]  # fmt: skip


def _keyed(row: UsageRow, key: str) -> UsageRow:
    return dataclasses.replace(row, key=key)


def test_usage_by_user_over_the_whole_workload(workload: JobStore) -> None:
    assert _usage(workload, T0, NOW, UsageBy.USER) == _approx([ALICE, BOB, CAROL])


def test_usage_by_group_charges_the_first_group_and_shows_none_as_a_dash(
    workload: JobStore,
) -> None:
    assert _usage(workload, T0, NOW, UsageBy.GROUP) == _approx(
        [_keyed(CAROL, "-"), _keyed(ALICE, "nlp-team"), _keyed(BOB, "vision-team")]
    )


def test_usage_by_queue_adds_up_the_users_of_a_queue(workload: JobStore) -> None:
    nlp = UsageRow(
        "nlp", system_hours=ALICE.system_hours, memoryx_gib_hours=ALICE.memoryx_gib_hours,
        succeeded=1, cancelled=1 + 1, wait_p50_seconds=20, wait_p95_seconds=60,
        preemptions=1, restarts=1, attempts=4,
    )  # fmt: skip
    assert _usage(workload, T0, NOW, UsageBy.QUEUE) == _approx([nlp, _keyed(BOB, "vision")])


def test_a_window_counts_only_the_part_of_each_attempt_inside_it(workload: JobStore) -> None:
    # [10+H/2, 10+H): the second half of a1's first attempt (2 systems x H/2) and a2's second
    # attempt from 10+H/2 to its end at 80+3H/4. a1's preemption at 10+H is at the end of the
    # window, so after it; nothing was scheduled or ended in the window.
    since, until = T0 + 10 + H / 2, T0 + 10 + H
    a2_seconds = (80 + 3 * H / 4) - (10 + H / 2)
    alice = UsageRow(
        "alice", system_hours=2 * 0.5 + 1 * a2_seconds / H,
        memoryx_gib_hours=MX / GIB * (0.5 + a2_seconds / H), cancelled=1,
    )  # fmt: skip
    assert _usage(workload, since, until, UsageBy.USER) == _approx([alice])

    # One second more takes in the preemption and b1's scheduling (its wait H-90), and a
    # second of b1's hold (2 systems).
    bob = UsageRow(
        "bob", system_hours=2 * 1 / H, memoryx_gib_hours=MX / GIB / H,
        wait_p50_seconds=H - 90, wait_p95_seconds=H - 90, attempts=1,
    )  # fmt: skip
    alice = UsageRow(
        "alice", system_hours=2 * 0.5 + 1 * a2_seconds / H,
        memoryx_gib_hours=MX / GIB * (0.5 + a2_seconds / H), cancelled=1, preemptions=1,
    )  # fmt: skip
    assert _usage(workload, since, until + 1, UsageBy.USER) == _approx([alice, bob])


def test_a_job_still_running_counts_up_to_now(workload: JobStore) -> None:
    # b2 holds 1 system from 2H+40; a1's second attempt ended at 40+3H.
    since = T0 + 3 * H
    for now, b2_hours in ((T0 + 3 * H + 40, 1.0), (NOW, 2.0), (NOW + H, 3.0)):
        rows = workload.usage(UsageQuery(since, NOW + 10 * H, UsageBy.QUEUE), now)
        b2 = b2_hours - 1 + 40 / H  # its part after `since`
        assert rows == _approx([
            UsageRow("nlp", system_hours=2 * (40 / H), memoryx_gib_hours=MX / GIB * 40 / H,
                     succeeded=1),
            UsageRow("vision", system_hours=1 * b2, memoryx_gib_hours=MX / GIB * b2),
        ])  # fmt: skip
    # A window that ends before now counts it up to the window's end only.
    until = T0 + 3 * H + H / 2
    rows = workload.usage(UsageQuery(since, until, UsageBy.USER), NOW)
    assert [(r.key, r.system_hours) for r in rows] == [
        ("alice", pytest.approx(2 * 40 / H)),
        ("bob", pytest.approx(1 * 0.5)),
    ]


def test_an_attempt_is_counted_once_while_it_holds_and_after_it_ended(store: JobStore) -> None:
    # The same attempt, read while it runs and after it ended, counts the same.
    define_queues(store, "nlp")
    _submit(store, "wsjob-a", "alice", (), "nlp", num_csx=2, at=T0)
    _run(store, "wsjob-a", T0 + 5)
    query = UsageQuery(T0, T0 + 10 * H, UsageBy.USER)
    running = store.usage(query, T0 + 5 + H)
    _end(store, "wsjob-a", Phase.SUCCEEDED, T0 + 5 + H)
    ended = store.usage(query, T0 + 5 + H)
    expected = UsageRow(
        "alice", system_hours=2 * 1, memoryx_gib_hours=MX / GIB, wait_p50_seconds=5,
        wait_p95_seconds=5, attempts=1,
    )  # fmt: skip
    assert running == _approx([expected])
    assert ended == _approx([dataclasses.replace(expected, succeeded=1)])


def test_keys_with_nothing_in_the_window_are_absent(workload: JobStore) -> None:
    assert _usage(workload, T0 - 10 * H, T0, UsageBy.USER) == []
    # After everything but b2 ended: only bob, holding.
    rows = _usage(workload, T0 + 3 * H + 60, NOW, UsageBy.GROUP)
    assert [r.key for r in rows] == ["vision-team"]


def test_waits_percentiles_are_nearest_rank(store: JobStore) -> None:
    # Twenty jobs of one user, waiting 1..20 s: p50 the 10th smallest, p95 the 19th.
    define_queues(store, "nlp")
    for n in range(1, 21):
        _submit(store, f"wsjob-{n:02d}", "dave", (), "nlp", num_csx=1, at=T0 + 100 * n)
        _run(store, f"wsjob-{n:02d}", T0 + 100 * n + n)
        _end(store, f"wsjob-{n:02d}", Phase.FAILED, T0 + 100 * n + 50)
    [row] = store.usage(UsageQuery(T0, T0 + H, UsageBy.USER), T0 + H)
    assert (row.wait_p50_seconds, row.wait_p95_seconds, row.attempts, row.failed) == (
        10,
        19,
        20,
        20,
    )
