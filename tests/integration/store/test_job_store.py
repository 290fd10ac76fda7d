"""The JobStore contract, run against every backend through the parametrized `store_url`."""

from __future__ import annotations

import base64
import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, func, inspect, select
from sqlalchemy.exc import IntegrityError

from appliance.domain.errors import InvalidSpec, NotFound
from appliance.domain.inventory import Node, NodeKind, NodeUsage, default_pool
from appliance.domain.job import Job, JobEvent, Progress, ReplicaPhase
from appliance.domain.listing import MAX_LIMIT, JobQuery
from appliance.domain.phases import ACTIVE, TERMINAL, TRANSITIONS, Outcome, Phase
from appliance.domain.plan import Role, plan_replicas
from appliance.domain.queue import Placement
from appliance.domain.spec import JobSpec, Mode, Priority, validate_spec
from appliance.scheduler.admission import admit
from appliance.store.engine import alembic_config, migrate
from appliance.store.jobs import JobStore, NewJob, PhaseChange
from appliance.store.tables import Base, JobEventRow, PlacementRow, ReplicaRow

PARAMS = "model:\n  name: fc_mnist\n  hidden_sizes: [64]\noptimizer:\n  optimizer_type: adam\n"
T0 = 1_700_000_000.125
# The forward chain that brings a new (QUEUED) job to each phase.
PATH_TO: dict[Phase, tuple[Phase, ...]] = {
    Phase.QUEUED: (),
    Phase.SCHEDULED: (Phase.SCHEDULED,),
    Phase.INITIALIZING: (Phase.SCHEDULED, Phase.INITIALIZING),
    Phase.RUNNING: (Phase.SCHEDULED, Phase.INITIALIZING, Phase.RUNNING),
    Phase.SUCCEEDED: (Phase.SCHEDULED, Phase.INITIALIZING, Phase.RUNNING, Phase.SUCCEEDED),
    Phase.FAILED: (Phase.FAILED,),
    Phase.CANCELLED: (Phase.CANCELLED,),
}
PHASE_ORDER = list(Phase)


def in_table_order(phases: Iterable[Phase]) -> list[Phase]:
    return sorted(phases, key=PHASE_ORDER.index)


T = TypeVar("T")


# ---- helpers ----------------------------------------------------------------------------------


def make_spec(
    *,
    num_csx: int = 1,
    labels: Mapping[str, str] | None = None,
    priority: Priority = Priority.P2,
    mode: Mode = Mode.TRAIN,
    model_dir: str = "",
) -> JobSpec:
    return validate_spec(
        params_yaml=PARAMS,
        num_csx=num_csx,
        num_steps=100,
        mode=mode,
        labels=labels,
        priority=priority,
        model_dir=model_dir,
    )


def submit(
    store: JobStore, job_id: str, *, now: float = T0, user: str = "alice", **spec: Any
) -> Job:
    job_spec = make_spec(**spec)
    plan = plan_replicas(job_spec, default_pool())
    return store.create_jobs([NewJob(job_id, user, job_spec, plan)], now)[0]


def drive(store: JobStore, job_id: str, phase: Phase, now: float = T0 + 1) -> None:
    """Walk a QUEUED job along the table to `phase`."""
    for step in PATH_TO[phase]:
        change = store.set_phase(job_id, step, f"to {step}", now)
        assert change.outcome is Outcome.APPLIED, (job_id, step, change)


def usage(store: JobStore) -> dict[str, int]:
    """Used amount per node, only for nodes something is held on."""
    return {u.node.name: u.used for u in store.pool_usage() if u.used}


def placements_for(store: JobStore, job_id: str) -> tuple[Placement, ...]:
    """What admission decides for `job_id` on the stored queue and pool."""
    decisions = {d.job_id: d for d in admit(store.queued_jobs(), store.pool_usage()).admitted}
    return decisions[job_id].placements


def snapshot(store: JobStore, job_id: str) -> tuple[Job, list[JobEvent], list[NodeUsage]]:
    return store.get_job(job_id), store.events(job_id), store.pool_usage()


def run_together(count: int, call: Callable[[int], T]) -> list[T]:
    """Run call(0..count-1) on `count` threads released at once by a barrier."""
    barrier = threading.Barrier(count, timeout=30)
    results: list[T | None] = [None] * count
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            barrier.wait()
            results[index] = call(index)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]


# ---- schema -----------------------------------------------------------------------------------


def test_migrate_twice_is_idempotent_and_schema_matches_tables(
    engine: Engine, store: JobStore
) -> None:
    submit(store, "wsjob-before")
    migrate(engine)  # the fixture migrated once already

    heads = ScriptDirectory.from_config(alembic_config(engine)).get_heads()
    with engine.connect() as conn:
        context = MigrationContext.configure(conn)
        assert context.get_current_heads() == tuple(heads)
        assert compare_metadata(context, Base.metadata) == []
    assert set(Base.metadata.tables) <= set(inspect(engine).get_table_names())
    assert store.get_job("wsjob-before").phase is Phase.QUEUED


# ---- create and read --------------------------------------------------------------------------


def test_create_then_get_round_trips_spec_plan_and_first_event(store: JobStore) -> None:
    spec = make_spec(
        num_csx=2,
        labels={"team": "ml", "example.com/run": "r-1", "empty": ""},
        priority=Priority.P1,
        mode=Mode.TRAIN_AND_EVAL,
        model_dir="/models/run-1",
    )
    plan = plan_replicas(spec, default_pool())

    [created] = store.create_jobs([NewJob("wsjob-a", "alice", spec, plan)], T0)
    job = store.get_job("wsjob-a")

    assert job.spec == spec
    assert dict(job.spec.labels) == {"team": "ml", "example.com/run": "r-1", "empty": ""}
    assert [(q.job_id, q.plan) for q in store.queued_jobs()] == [("wsjob-a", plan)]
    assert (job.id, job.user, job.phase) == ("wsjob-a", "alice", Phase.QUEUED)
    assert (job.created_at, job.updated_at) == (T0, T0)
    assert (job.started_at, job.finished_at, job.systems, job.replicas) == (0.0, 0.0, (), ())
    assert job.pending_reason == "waiting for the scheduler"
    assert job.queue_position == 1
    assert job.progress == Progress()
    assert dataclasses.replace(created, queue_position=1) == job
    [event] = store.events("wsjob-a")
    assert (event.from_phase, event.to_phase, event.reason) == (
        None,
        Phase.QUEUED,
        "submitted by alice",
    )
    assert event.time == T0


def test_unknown_job_is_not_found(store: JobStore) -> None:
    submit(store, "wsjob-known")
    with pytest.raises(NotFound):
        store.get_job("wsjob-unknown")
    with pytest.raises(NotFound):
        store.events("wsjob-unknown")
    with pytest.raises(NotFound):
        store.set_phase("wsjob-unknown", Phase.CANCELLED, "no", T0)
    assert store.phase_of("wsjob-unknown") is None
    assert store.phases_of(["wsjob-unknown", "wsjob-known"]) == {"wsjob-known": Phase.QUEUED}
    assert store.update_replica("wsjob-unknown", "chief-0", message="x") is False


# ---- list -------------------------------------------------------------------------------------


def ids(jobs: Sequence[Job]) -> list[str]:
    return [j.id for j in jobs]


def test_list_shows_active_jobs_by_default_and_terminal_on_request(store: JobStore) -> None:
    for i, phase in enumerate(PHASE_ORDER):
        submit(store, f"wsjob-{phase.lower()}", now=T0 + i)
        drive(store, f"wsjob-{phase.lower()}", phase)

    active, token = store.list_jobs(JobQuery())
    everything, _ = store.list_jobs(JobQuery(include_terminal=True))

    assert token == ""
    assert {j.phase for j in active} == set(ACTIVE)
    assert len(active) == len(ACTIVE)
    assert {j.phase for j in everything} == set(Phase)
    assert len(everything) == len(Phase)


def test_list_filters_by_user(store: JobStore) -> None:
    submit(store, "wsjob-a1", user="alice", now=T0)
    submit(store, "wsjob-b1", user="bob", now=T0 + 1)
    submit(store, "wsjob-a2", user="alice", now=T0 + 2)

    jobs, _ = store.list_jobs(JobQuery(user="alice"))

    assert ids(jobs) == ["wsjob-a2", "wsjob-a1"]


def test_list_filters_on_every_label_given(store: JobStore) -> None:
    submit(store, "wsjob-ml-prod", labels={"team": "ml", "env": "prod"}, now=T0)
    submit(store, "wsjob-ml-dev", labels={"team": "ml", "env": "dev"}, now=T0 + 1)
    submit(store, "wsjob-infra-prod", labels={"team": "infra", "env": "prod"}, now=T0 + 2)
    submit(store, "wsjob-unlabelled", now=T0 + 3)

    def listed(labels: dict[str, str]) -> list[str]:
        return ids(store.list_jobs(JobQuery(labels=labels))[0])

    assert listed({"team": "ml", "env": "prod"}) == ["wsjob-ml-prod"]
    assert listed({"team": "ml"}) == ["wsjob-ml-dev", "wsjob-ml-prod"]
    assert listed({"env": "prod"}) == ["wsjob-infra-prod", "wsjob-ml-prod"]
    assert listed({"team": "ml", "env": "staging"}) == []
    assert listed({}) == ["wsjob-unlabelled", "wsjob-infra-prod", "wsjob-ml-dev", "wsjob-ml-prod"]


def test_list_is_newest_first_with_id_breaking_ties(store: JobStore) -> None:
    submit(store, "wsjob-b", now=T0)
    submit(store, "wsjob-c", now=T0 + 2)
    submit(store, "wsjob-a", now=T0)
    submit(store, "wsjob-d", now=T0 + 1)

    jobs, _ = store.list_jobs(JobQuery())

    assert ids(jobs) == ["wsjob-c", "wsjob-d", "wsjob-b", "wsjob-a"]


def test_keyset_pagination_returns_every_job_exactly_once_in_order(store: JobStore) -> None:
    # Three jobs share each submit time (fractional, to round-trip through the token), so page
    # boundaries fall inside groups of equal created_at.
    expected = []
    for i in range(25):
        job_id = f"wsjob-{(i * 7) % 25:04d}"
        created = T0 + (i // 3) * 0.001
        submit(store, job_id, now=created)
        expected.append((created, job_id))
    expected.sort(reverse=True)

    seen: list[str] = []
    pages = []
    token = ""
    while True:
        jobs, token = store.list_jobs(JobQuery(limit=7, page_token=token))
        pages.append(len(jobs))
        seen += ids(jobs)
        if not token:
            break
        assert len(pages) < 10, "pagination does not end"

    assert pages == [7, 7, 7, 4]
    assert seen == [job_id for _, job_id in expected]


def test_last_full_page_has_no_token(store: JobStore) -> None:
    for i in range(4):
        submit(store, f"wsjob-{i}", now=T0 + i)

    first, token = store.list_jobs(JobQuery(limit=2))
    second, last = store.list_jobs(JobQuery(limit=2, page_token=token))

    assert (ids(first), ids(second), last) == (
        ["wsjob-3", "wsjob-2"],
        ["wsjob-1", "wsjob-0"],
        "",
    )


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode()


@pytest.mark.parametrize(
    "token",
    [
        "not a token!",
        _b64(b"not json"),
        _b64(b"\xff\xfe"),
        _b64(b"5"),
        _b64(b"[1.0]"),
        _b64(b'["yesterday", "wsjob-a"]'),
        _b64(b'[null, "wsjob-a"]'),
    ],
)
def test_bad_page_token_is_invalid_spec(store: JobStore, token: str) -> None:
    submit(store, "wsjob-a")
    with pytest.raises(InvalidSpec) as raised:
        store.list_jobs(JobQuery(page_token=token))
    assert raised.value.field == "page_token"


def test_limit_above_maximum_is_invalid_spec(store: JobStore) -> None:
    with pytest.raises(InvalidSpec) as raised:
        store.list_jobs(JobQuery(limit=MAX_LIMIT + 1))
    assert raised.value.field == "limit"


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


def test_concurrent_schedule_reserves_once(store: JobStore) -> None:
    submit(store, "wsjob-a", num_csx=2)
    placements = placements_for(store, "wsjob-a")

    changes = run_together(6, lambda _: store.schedule("wsjob-a", placements, T0 + 1))

    assert sorted(c.outcome.value for c in changes).count(Outcome.APPLIED.value) == 1
    assert usage(store) == {p.node: p.amount for p in placements}
    assert len(store.replicas("wsjob-a")) == 5


# ---- pending reasons and queue order ------------------------------------------------------------


def test_set_pending_reasons_writes_only_changed_rows_of_queued_jobs(store: JobStore) -> None:
    for job_id in ("wsjob-a", "wsjob-b", "wsjob-c"):
        submit(store, job_id)
    drive(store, "wsjob-c", Phase.CANCELLED)
    reasons = {
        "wsjob-a": "needs 4 systems, 2 free",
        "wsjob-b": "waiting for the scheduler",  # unchanged
        "wsjob-c": "not queued any more",
        "wsjob-unknown": "never existed",
    }

    assert store.set_pending_reasons(reasons, T0 + 1) == 1
    assert store.set_pending_reasons(reasons, T0 + 2) == 0
    assert store.set_pending_reasons({}, T0 + 3) == 0
    assert store.set_pending_reasons({"wsjob-b": "behind wsjob-a"}, T0 + 4) == 1

    reason_of = {j: store.get_job(j).pending_reason for j in ("wsjob-a", "wsjob-b", "wsjob-c")}
    assert reason_of == {
        "wsjob-a": "needs 4 systems, 2 free",
        "wsjob-b": "behind wsjob-a",
        "wsjob-c": "",
    }
    assert store.get_job("wsjob-c").phase is Phase.CANCELLED


def test_queue_position_follows_priority_then_submit_time(store: JobStore) -> None:
    submit(store, "wsjob-p2-late", priority=Priority.P2, now=T0 + 3)
    submit(store, "wsjob-p1-late", priority=Priority.P1, now=T0 + 4)
    submit(store, "wsjob-p2-early-b", priority=Priority.P2, now=T0)
    submit(store, "wsjob-p2-early-a", priority=Priority.P2, now=T0)
    submit(store, "wsjob-p0", priority=Priority.P0, now=T0 + 9)
    submit(store, "wsjob-p1-early", priority=Priority.P1, now=T0 + 1)
    submit(store, "wsjob-running", priority=Priority.P0, now=T0 - 1)
    drive(store, "wsjob-running", Phase.RUNNING)
    expected = [
        "wsjob-p0",
        "wsjob-p1-early",
        "wsjob-p1-late",
        "wsjob-p2-early-a",
        "wsjob-p2-early-b",
        "wsjob-p2-late",
    ]

    positions = {j: store.get_job(j).queue_position for j in [*expected, "wsjob-running"]}

    assert positions == {**{j: i for i, j in enumerate(expected, 1)}, "wsjob-running": 0}
    assert [q.job_id for q in store.queued_jobs()] == expected


# ---- events, replicas, progress, pool ----------------------------------------------------------


def test_events_after_seq_returns_only_later_events_of_that_job(store: JobStore) -> None:
    submit(store, "wsjob-a")
    submit(store, "wsjob-b")
    for step in PATH_TO[Phase.RUNNING]:
        store.set_phase("wsjob-a", step, f"a to {step}", T0 + 1)
        store.set_phase("wsjob-b", step, f"b to {step}", T0 + 1)

    events = store.events("wsjob-a")

    assert [e.to_phase for e in events] == [Phase.QUEUED, *PATH_TO[Phase.RUNNING]]
    assert all(e.job_id == "wsjob-a" for e in events)
    assert [e.seq for e in events] == sorted({e.seq for e in events})
    assert store.events("wsjob-a", after_seq=events[1].seq) == events[2:]
    assert store.events("wsjob-a", after_seq=events[-1].seq) == []
    assert store.events("wsjob-a", after_seq=0) == events
    with store.engine.connect() as conn:
        total = conn.scalar(select(func.count()).select_from(JobEventRow))
    assert total == 2 * len(events)


def test_replica_updates_progress_and_phase_lookups(store: JobStore) -> None:
    submit(store, "wsjob-a")
    submit(store, "wsjob-b")
    store.schedule("wsjob-a", placements_for(store, "wsjob-a"), T0 + 1)

    assert store.update_replica("wsjob-a", "cs2-0", phase="READY", address="10.0.0.1:9000", pid=42)
    assert store.update_replica("wsjob-a", "cs2-0", exit_code=0, message="done", log_tail="ok")
    assert not store.update_replica("wsjob-a", "cs2-7", message="no such replica")
    progress = Progress(step=10, num_steps=100, loss=0.5, steps_per_second=2.0, reported_at=T0)
    store.set_progress("wsjob-a", progress)

    [cs2] = [r for r in store.replicas("wsjob-a") if r.name == "cs2-0"]
    assert (cs2.phase, cs2.address, cs2.pid, cs2.exit_code, cs2.message, cs2.log_tail) == (
        ReplicaPhase.READY,
        "10.0.0.1:9000",
        42,
        0,
        "done",
        "ok",
    )
    assert store.get_job("wsjob-a").progress == progress
    assert store.phases_of(["wsjob-a", "wsjob-b"]) == {
        "wsjob-a": Phase.SCHEDULED,
        "wsjob-b": Phase.QUEUED,
    }
    assert store.phases_of([]) == {}
    assert ids(store.jobs_in([Phase.SCHEDULED])) == ["wsjob-a"]
    assert sorted(ids(store.jobs_in([Phase.SCHEDULED, Phase.QUEUED]))) == ["wsjob-a", "wsjob-b"]


def test_sync_pool_keeps_a_removed_node_while_a_job_holds_it(store: JobStore) -> None:
    submit(store, "wsjob-a", num_csx=4)
    assert store.schedule("wsjob-a", placements_for(store, "wsjob-a"), T0 + 1).applied
    smaller = [n for n in default_pool() if n.name != "cs2-04"]
    smaller.append(Node("cs2-05", NodeKind.SYSTEM, 1))

    store.sync_pool(smaller)
    assert {"cs2-04", "cs2-05"} <= {n.name for n in store.pool()}

    store.set_phase("wsjob-a", Phase.CANCELLED, "done", T0 + 2)
    store.sync_pool(smaller)
    assert sorted(n.name for n in store.pool()) == sorted(n.name for n in smaller)


# ---- summary keys (what StreamJobs caches under) ------------------------------------------------


def all_keys(store: JobStore, query: JobQuery) -> list[tuple[str, float, int]]:
    keys: list[tuple[str, float, int]] = []
    while True:
        page, token = store.list_job_keys(query)
        keys += page
        if not token:
            return keys
        query = dataclasses.replace(query, page_token=token)


def test_job_keys_page_like_list_jobs(store: JobStore) -> None:
    for i in range(12):
        submit(store, f"wsjob-key{i:04d}", now=T0 + (i // 4) * 0.001)
    drive(store, "wsjob-key0003", Phase.CANCELLED)

    for include_terminal in (False, True):
        listed = ids(store.list_jobs(JobQuery(include_terminal=include_terminal, limit=500))[0])
        keys = all_keys(store, JobQuery(include_terminal=include_terminal, limit=5))
        assert [k[0] for k in keys] == listed
    assert "wsjob-key0003" not in [k[0] for k in all_keys(store, JobQuery(limit=5))]


def test_every_change_a_summary_shows_bumps_its_version(store: JobStore) -> None:
    submit(store, "wsjob-ver0")

    def version() -> int:
        [(_, _, v)] = all_keys(store, JobQuery(include_terminal=True))
        return v

    seen = [version()]
    store.set_pending_reasons({"wsjob-ver0": "needs 1 system, 0 free"}, T0)
    seen.append(version())
    store.set_pending_reasons({"wsjob-ver0": "needs 1 system, 0 free"}, T0)  # unchanged
    assert version() == seen[-1]
    drive(store, "wsjob-ver0", Phase.RUNNING)
    seen.append(version())
    store.set_progress("wsjob-ver0", Progress(step=3, num_steps=100, loss=1.5))
    seen.append(version())
    store.set_phase("wsjob-ver0", Phase.SUCCEEDED, "done", T0 + 2)
    seen.append(version())
    assert seen == sorted(set(seen)), seen

    [summary] = store.job_summaries(["wsjob-ver0", "wsjob-unknown"])
    assert summary.phase is Phase.SUCCEEDED and summary.progress.step == 3
    assert summary.spec.params_yaml == ""  # summaries leave out the params


def test_phase_filter_lists_exactly_those_phases(store: JobStore) -> None:
    for i in range(4):
        submit(store, f"wsjob-ph{i:04d}", now=T0 + i)
    drive(store, "wsjob-ph0001", Phase.CANCELLED)
    drive(store, "wsjob-ph0002", Phase.RUNNING)
    query = JobQuery(phases=frozenset({Phase.CANCELLED, Phase.RUNNING}))
    expected = ["wsjob-ph0002", "wsjob-ph0001"]
    assert ids(store.list_jobs(query)[0]) == expected
    assert [k[0] for k in all_keys(store, dataclasses.replace(query, limit=1))] == expected
    assert store.count_by_phase() == {Phase.QUEUED: 2, Phase.RUNNING: 1, Phase.CANCELLED: 1}
