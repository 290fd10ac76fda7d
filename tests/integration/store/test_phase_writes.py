"""The JobStore contract for its one checked phase writer: every transition of the table, the
terminal rule, compare-and-set, schedule's reservations; run against every backend."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from appliance.domain.backlog import Placement
from appliance.domain.inventory import default_pool
from appliance.domain.job import Lease, ReplicaPhase
from appliance.domain.phase_moves import PhaseChange
from appliance.domain.phases import ACTIVE, TERMINAL, TRANSITIONS, Outcome, Phase
from appliance.domain.plan import Role, plan_replicas
from appliance.scheduler.admission import admit
from appliance.store.jobs import JobStore, NewJob
from appliance.store.tables import PlacementRow, ReplicaRow
from tests.integration.store.driving import (
    PATH_TO,
    PHASE_ORDER,
    T0,
    drive,
    in_table_order,
    make_spec,
    placements_for,
    run_together,
    snapshot,
    submit,
    usage,
)

# ---- set_phase ---------------------------------------------------------------------------------


def _key(pair: tuple[Phase, Phase]) -> tuple[int, int]:
    return PHASE_ORDER.index(pair[0]), PHASE_ORDER.index(pair[1])


LEGAL = sorted(TRANSITIONS, key=_key)
ILLEGAL = sorted(
    ((a, b) for a in Phase for b in Phase if a is not b and (a, b) not in TRANSITIONS), key=_key
)


@pytest.mark.parametrize(("source", "target"), LEGAL, ids=[f"{a}->{b}" for a, b in LEGAL])
def test_every_legal_transition_applies_and_records_its_event(
    store: JobStore, source: Phase, target: Phase
) -> None:
    submit(store, "wsjob-a")
    drive(store, "wsjob-a", source, now=T0 + 1)
    before = store.events("wsjob-a")

    change = store.set_phase("wsjob-a", target, "because", T0 + 5)

    assert change.outcome is Outcome.APPLIED and change.applied
    assert change.event is not None
    assert (change.event.from_phase, change.event.to_phase) == (source, target)
    assert (change.event.reason, change.event.time) == ("because", T0 + 5)
    assert change.event.seq > before[-1].seq
    assert store.events("wsjob-a") == [*before, change.event]
    job = store.get_job("wsjob-a")
    assert (job.phase, job.updated_at) == (target, T0 + 5)
    if target is Phase.RUNNING:
        assert job.started_at == T0 + 5
    if target in TERMINAL:
        assert (job.finished_at, job.reason, job.pending_reason) == (T0 + 5, "because", "")
    else:
        assert job.finished_at == 0.0


@pytest.mark.parametrize("source", in_table_order(ACTIVE), ids=lambda p: str(p).lower())
def test_illegal_transitions_are_invalid_and_change_nothing(
    store: JobStore, source: Phase
) -> None:
    submit(store, "wsjob-a")
    drive(store, "wsjob-a", source)
    before = snapshot(store, "wsjob-a")

    for target in (b for a, b in ILLEGAL if a is source):
        assert store.set_phase("wsjob-a", target, "no", T0 + 9) == PhaseChange(Outcome.INVALID)

    assert snapshot(store, "wsjob-a") == before


@pytest.mark.parametrize("final", in_table_order(TERMINAL), ids=str.lower)
def test_terminal_phases_never_change(store: JobStore, final: Phase) -> None:
    submit(store, "wsjob-a")
    drive(store, "wsjob-a", final)
    before = snapshot(store, "wsjob-a")

    for target in Phase:
        expected = Outcome.ALREADY if target is final else Outcome.INVALID
        assert store.set_phase("wsjob-a", target, "again", T0 + 9).outcome is expected
        assert store.set_phase("wsjob-a", target, "again", T0 + 9, expected=final).outcome is (
            expected
        )

    assert snapshot(store, "wsjob-a") == before


def test_same_phase_without_expectation_is_already(store: JobStore) -> None:
    submit(store, "wsjob-a")
    before = snapshot(store, "wsjob-a")

    assert store.set_phase("wsjob-a", Phase.QUEUED, "again", T0 + 1) == PhaseChange(
        Outcome.ALREADY
    )
    assert snapshot(store, "wsjob-a") == before


def test_compare_and_set_loses_when_the_phase_moved(store: JobStore) -> None:
    submit(store, "wsjob-a")
    drive(store, "wsjob-a", Phase.SCHEDULED)
    before = snapshot(store, "wsjob-a")

    # Decided on QUEUED, but the job is SCHEDULED now: even a legal move is lost.
    lost = store.set_phase("wsjob-a", Phase.CANCELLED, "late", T0 + 9, expected=Phase.QUEUED)
    # Decided on RUNNING to go to SCHEDULED: already there.
    already = store.set_phase("wsjob-a", Phase.SCHEDULED, "late", T0 + 9, expected=Phase.RUNNING)

    assert lost == PhaseChange(Outcome.LOST)
    assert already == PhaseChange(Outcome.ALREADY)
    assert snapshot(store, "wsjob-a") == before
    applied = store.set_phase("wsjob-a", Phase.CANCELLED, "now", T0 + 9, expected=Phase.SCHEDULED)
    assert applied.applied


def test_concurrent_set_phase_applies_exactly_once(store: JobStore) -> None:
    submit(store, "wsjob-a")
    targets = [Phase.CANCELLED, Phase.FAILED, Phase.SCHEDULED] * 3

    changes = run_together(
        len(targets),
        lambda i: store.set_phase(
            "wsjob-a", targets[i], f"thread {i}", T0 + 1, expected=Phase.QUEUED
        ),
    )

    applied = [c for c in changes if c.applied]
    assert len(changes) == len(targets)
    assert len(applied) == 1
    assert all(c.outcome in (Outcome.LOST, Outcome.ALREADY) for c in changes if not c.applied)
    winner = applied[0].event
    assert winner is not None
    assert store.phase_of("wsjob-a") is winner.to_phase
    assert store.events("wsjob-a")[1:] == [winner]


# ---- schedule and placements --------------------------------------------------------------------


def test_schedule_reserves_placements_and_creates_replica_rows(store: JobStore) -> None:
    submit(store, "wsjob-a", num_csx=2)
    placements = placements_for(store, "wsjob-a")

    change = store.schedule("wsjob-a", placements, T0 + 1)

    assert change.applied and change.event is not None
    assert change.event.reason == "reserved cs2-01, cs2-02"
    job = store.get_job("wsjob-a")
    assert (job.phase, job.systems, job.pending_reason) == (
        Phase.SCHEDULED,
        ("cs2-01", "cs2-02"),
        "",
    )
    assert usage(store) == {p.node: p.amount for p in placements}
    assert {"cs2-01", "cs2-02"} <= set(usage(store))
    names = [(r.name, r.role, r.node, r.phase) for r in job.replicas]
    node_of = {p.replica: p.node for p in placements}
    assert names == [
        ("chief-0", Role.CHIEF, "mgmt", ReplicaPhase.PENDING),
        ("cs2-0", Role.CS2, "cs2-01", ReplicaPhase.PENDING),
        ("cs2-1", Role.CS2, "cs2-02", ReplicaPhase.PENDING),
        ("swarmx-0", Role.SWARMX, node_of["swarmx-0"], ReplicaPhase.PENDING),
        ("memoryx-0", Role.MEMORYX, node_of["memoryx-0"], ReplicaPhase.PENDING),
    ]
    assert store.replicas("wsjob-a") == list(job.replicas)
    # What is reserved is no longer free for the next decision.
    submit(store, "wsjob-b", num_csx=3)
    assert (
        admit(store.queued_jobs(), store.pool_usage())
        .pending["wsjob-b"]
        .startswith("needs 3 systems, 2 free")
    )


@pytest.mark.parametrize(
    ("holding", "final"),
    [
        (Phase.SCHEDULED, Phase.CANCELLED),
        (Phase.INITIALIZING, Phase.FAILED),
        (Phase.RUNNING, Phase.SUCCEEDED),
        (Phase.RUNNING, Phase.CANCELLED),
    ],
    ids=lambda p: str(p).lower(),
)
def test_leaving_for_a_terminal_phase_releases_placements(
    store: JobStore, holding: Phase, final: Phase
) -> None:
    submit(store, "wsjob-a", num_csx=2)
    submit(store, "wsjob-b", num_csx=1, now=T0 + 1)
    assert store.schedule("wsjob-a", placements_for(store, "wsjob-a"), T0 + 2).applied
    held_by_a = usage(store)
    assert store.schedule("wsjob-b", placements_for(store, "wsjob-b"), T0 + 2).applied
    held_by_both = usage(store)
    for step in PATH_TO[holding][1:]:
        assert store.set_phase("wsjob-a", step, "on", T0 + 3).applied
    assert usage(store) == held_by_both

    assert store.set_phase("wsjob-a", final, "done", T0 + 4).applied

    released = {n: held_by_both[n] - held_by_a.get(n, 0) for n in held_by_both}
    assert usage(store) == {n: used for n, used in released.items() if used}
    assert store.get_job("wsjob-a").systems == ("cs2-01", "cs2-02")  # kept as history


def test_an_ended_job_holds_no_lease(store: JobStore) -> None:
    spec = make_spec()
    leased = NewJob("wsjob-a", "alice", spec, plan_replicas(spec, default_pool()), 60.0, "vm:1")
    store.create_jobs([leased], T0)
    drive(store, "wsjob-a", Phase.RUNNING)
    assert store.get_job("wsjob-a").lease == Lease(60.0, T0 + 60.0, "vm:1")

    assert store.set_phase("wsjob-a", Phase.SUCCEEDED, "done", T0 + 2).applied
    assert store.get_job("wsjob-a").lease is None  # released, not "held until T0 + 60"
    [summary] = store.job_summaries(["wsjob-a"])
    assert summary.lease is None


def test_schedule_is_all_or_nothing(store: JobStore) -> None:
    submit(store, "wsjob-a")
    good = placements_for(store, "wsjob-a")
    bad = (*good, Placement("cs2-9", Role.CS2, "no-such-node", 1))
    before = snapshot(store, "wsjob-a")

    with pytest.raises(IntegrityError):
        store.schedule("wsjob-a", bad, T0 + 1)

    assert snapshot(store, "wsjob-a") == before
    with store.engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(PlacementRow)) == 0
        assert conn.scalar(select(func.count()).select_from(ReplicaRow)) == 0
    assert store.schedule("wsjob-a", good, T0 + 2).applied


def test_schedule_of_a_job_that_left_the_queue_reserves_nothing(store: JobStore) -> None:
    submit(store, "wsjob-cancelled")
    submit(store, "wsjob-scheduled")
    placements = placements_for(store, "wsjob-cancelled")
    drive(store, "wsjob-cancelled", Phase.CANCELLED)
    assert store.schedule("wsjob-scheduled", placements, T0 + 1).applied
    held = usage(store)

    assert store.schedule("wsjob-cancelled", placements, T0 + 2) == PhaseChange(Outcome.LOST)
    assert store.schedule("wsjob-scheduled", placements, T0 + 2) == PhaseChange(Outcome.ALREADY)

    assert usage(store) == held
    assert store.replicas("wsjob-cancelled") == []
    assert len(store.replicas("wsjob-scheduled")) == 4


def test_a_pass_of_decisions_is_written_each_with_its_own_systems(store: JobStore) -> None:
    for job_id, size in (("wsjob-a", 1), ("wsjob-gone", 1), ("wsjob-b", 2)):
        submit(store, job_id, num_csx=size)
    decided = {
        d.job_id: d.placements for d in admit(store.queued_jobs(), store.pool_usage()).admitted
    }
    drive(store, "wsjob-gone", Phase.CANCELLED)

    outcomes = store.schedule_many(
        [(j, decided[j]) for j in ("wsjob-a", "wsjob-gone", "wsjob-b")], T0 + 1
    )

    applied = [isinstance(o, PhaseChange) and o.applied for o in outcomes]
    assert applied == [True, False, True]
    for job_id, change in (("wsjob-a", outcomes[0]), ("wsjob-b", outcomes[2])):
        systems = tuple(p.node for p in decided[job_id] if p.role is Role.CS2)
        assert isinstance(change, PhaseChange) and change.event is not None
        assert change.event.reason == "reserved " + ", ".join(systems)
        assert store.get_job(job_id).systems == systems
        assert store.events(job_id)[-1].reason == change.event.reason
    assert store.get_job("wsjob-gone").systems == ()
    assert store.replicas("wsjob-gone") == []
    held = {p.node for j in ("wsjob-a", "wsjob-b") for p in decided[j]}
    assert set(usage(store)) == held


def test_concurrent_schedule_reserves_once(store: JobStore) -> None:
    submit(store, "wsjob-a", num_csx=2)
    placements = placements_for(store, "wsjob-a")

    changes = run_together(6, lambda _: store.schedule("wsjob-a", placements, T0 + 1))

    assert sorted(c.outcome.value for c in changes).count(Outcome.APPLIED.value) == 1
    assert usage(store) == {p.node: p.amount for p in placements}
    assert len(store.replicas("wsjob-a")) == 5
