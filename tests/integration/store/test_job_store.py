"""The JobStore contract (schema, jobs, the queue, events, replicas, the pool), run against every
backend through the parametrized `store_url`; listing and phase writes have their own files."""

from __future__ import annotations

import dataclasses

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, func, inspect, select

from appliance.domain.errors import NotFound
from appliance.domain.inventory import Node, NodeKind, default_pool
from appliance.domain.job import Progress, ReplicaPhase
from appliance.domain.phases import Phase
from appliance.domain.plan import plan_replicas
from appliance.domain.spec import Mode, Priority
from appliance.store.engine import alembic_config, migrate
from appliance.store.jobs import JobStore, NewJob
from appliance.store.tables import Base, JobEventRow
from tests.integration.store.driving import (
    PATH_TO,
    T0,
    drive,
    ids,
    make_spec,
    placements_for,
    submit,
)

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
    store.set_progress("wsjob-a", 1, progress)

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


def test_the_store_keeps_each_systems_wafer(store: JobStore) -> None:
    pool = [*default_pool(), Node("cs2-big", NodeKind.SYSTEM, 1, wafer_bytes=80 * 10**9)]
    store.sync_pool(pool)
    store.forget_pool()
    wafers = {n.name: n.wafer_bytes for n in store.pool() if n.kind is NodeKind.SYSTEM}
    assert wafers == {"cs2-01": 40 * 10**9, "cs2-02": 40 * 10**9, "cs2-03": 40 * 10**9,
                      "cs2-04": 40 * 10**9, "cs2-big": 80 * 10**9}  # fmt: skip
