"""The batch forms of JobStore, on every backend: set_phases decides and writes each move
exactly as set_phase would, on its own, in one transaction; get_jobs and job_owners read many
jobs as get_job reads one."""

from __future__ import annotations

import dataclasses

from appliance.domain.auth import JobOwner
from appliance.domain.errors import NotFound
from appliance.domain.phase_moves import PhaseChange, PhaseMove
from appliance.domain.phases import Outcome, Phase
from appliance.domain.spec import Priority
from appliance.store.jobs import JobStore
from tests.integration.store.driving import (
    T0,
    drive,
    placements_for,
    run_together,
    submit,
    usage,
)


def _cases() -> list[tuple[Phase, Phase, Phase | None]]:
    """(phase, target, expected) with every expectation that decides differently: none, the
    job's phase, the target, and some other phase."""
    cases: list[tuple[Phase, Phase, Phase | None]] = []
    for source in Phase:
        for target in Phase:
            other = next(p for p in Phase if p not in (source, target))
            cases += ((source, target, e) for e in dict.fromkeys((None, source, target, other)))
    return cases


def test_a_batch_decides_every_move_as_set_phase_does(store: JobStore) -> None:
    """Every (phase, target, expectation): the same outcome, event and row in a batch as one
    set_phase call on a twin job."""
    cases = _cases()
    for index, (source, _, _) in enumerate(cases):
        for twin in ("batch", "single"):
            submit(store, f"wsjob-{twin}-{index:03d}")
            drive(store, f"wsjob-{twin}-{index:03d}", source)
    moves = [
        PhaseMove(f"wsjob-batch-{i:03d}", target, f"to {target}", expected)
        for i, (_, target, expected) in enumerate(cases)
    ]

    batch = store.set_phases(moves, T0 + 5)
    single = [
        store.set_phase(f"wsjob-single-{i:03d}", target, f"to {target}", T0 + 5, expected)
        for i, (_, target, expected) in enumerate(cases)
    ]

    assert len(batch) == len(cases)
    for index, (move, got, want) in enumerate(zip(moves, batch, single, strict=True)):
        assert isinstance(got, PhaseChange), (cases[index], got)
        assert got.outcome is want.outcome, cases[index]
        if got.event is not None:
            assert want.event is not None
            assert (got.event.job_id, got.event.time) == (move.job_id, T0 + 5)
            assert (got.event.from_phase, got.event.to_phase, got.event.reason) == (
                want.event.from_phase,
                want.event.to_phase,
                want.event.reason,
            )
        batch_job, batch_events = store.get_job(move.job_id), store.events(move.job_id)
        twin = f"wsjob-single-{index:03d}"
        single_job, single_events = store.get_job(twin), store.events(twin)
        # Twins differ only in their ids (and so in their places in the queue).
        renamed = dataclasses.replace(
            single_job, id=move.job_id, queue_position=batch_job.queue_position
        )
        assert batch_job == renamed, cases[index]
        assert [(e.from_phase, e.to_phase, e.reason) for e in batch_events] == [
            (e.from_phase, e.to_phase, e.reason) for e in single_events
        ]
        if got.event is not None:
            assert batch_events[-1] == got.event


def test_one_jobs_failure_does_not_fail_the_others(store: JobStore) -> None:
    for job_id in ("wsjob-queued", "wsjob-done", "wsjob-moved", "wsjob-other"):
        submit(store, job_id)
    drive(store, "wsjob-done", Phase.CANCELLED)
    drive(store, "wsjob-moved", Phase.SCHEDULED)

    changes = store.set_phases(
        [
            PhaseMove("wsjob-queued", Phase.CANCELLED, "bulk", Phase.QUEUED),
            PhaseMove("wsjob-unknown", Phase.CANCELLED, "bulk", Phase.QUEUED),
            PhaseMove("wsjob-done", Phase.CANCELLED, "bulk", Phase.QUEUED),
            PhaseMove("wsjob-moved", Phase.CANCELLED, "bulk", Phase.QUEUED),
            PhaseMove("wsjob-done", Phase.RUNNING, "bulk"),
            PhaseMove("wsjob-other", Phase.FAILED, "bulk"),
        ],
        T0 + 5,
    )

    outcomes = [c.outcome if isinstance(c, PhaseChange) else type(c) for c in changes]
    assert outcomes == [
        Outcome.APPLIED,
        NotFound,
        Outcome.ALREADY,
        Outcome.LOST,
        Outcome.INVALID,
        Outcome.APPLIED,
    ]
    assert "wsjob-unknown" in str(changes[1])
    assert store.phases_of(["wsjob-queued", "wsjob-done", "wsjob-moved", "wsjob-other"]) == {
        "wsjob-queued": Phase.CANCELLED,
        "wsjob-done": Phase.CANCELLED,
        "wsjob-moved": Phase.SCHEDULED,
        "wsjob-other": Phase.FAILED,
    }
    assert store.get_job("wsjob-queued").reason == "bulk"


def test_a_job_named_twice_sees_its_earlier_move(store: JobStore) -> None:
    submit(store, "wsjob-a")
    submit(store, "wsjob-b")

    changes = store.set_phases(
        [
            PhaseMove("wsjob-a", Phase.SCHEDULED, "first", Phase.QUEUED),
            PhaseMove("wsjob-b", Phase.CANCELLED, "once", Phase.QUEUED),
            PhaseMove("wsjob-a", Phase.INITIALIZING, "second", Phase.SCHEDULED),
            PhaseMove("wsjob-b", Phase.CANCELLED, "twice", Phase.QUEUED),
        ],
        T0 + 5,
    )

    assert [c.outcome for c in changes if isinstance(c, PhaseChange)] == [
        Outcome.APPLIED,
        Outcome.APPLIED,
        Outcome.APPLIED,
        Outcome.ALREADY,
    ]
    assert [e.to_phase for e in store.events("wsjob-a")] == [
        Phase.QUEUED,
        Phase.SCHEDULED,
        Phase.INITIALIZING,
    ]
    assert store.get_job("wsjob-b").reason == "once"
    assert len(store.events("wsjob-b")) == 2


def test_a_batch_releases_what_its_jobs_held(store: JobStore) -> None:
    submit(store, "wsjob-run", num_csx=2)
    store.schedule("wsjob-run", placements_for(store, "wsjob-run"), T0 + 1)
    for step in (Phase.INITIALIZING, Phase.RUNNING):
        assert store.set_phase("wsjob-run", step, f"to {step}", T0 + 2).applied
    submit(store, "wsjob-sched", num_csx=1)
    store.schedule("wsjob-sched", placements_for(store, "wsjob-sched"), T0 + 1)
    submit(store, "wsjob-queued")
    assert usage(store)

    changes = store.set_phases(
        [
            PhaseMove("wsjob-run", Phase.CANCELLED, "bulk", Phase.RUNNING),
            PhaseMove("wsjob-sched", Phase.CANCELLED, "bulk", Phase.SCHEDULED),
            PhaseMove("wsjob-queued", Phase.CANCELLED, "bulk", Phase.QUEUED),
        ],
        T0 + 5,
    )

    assert all(isinstance(c, PhaseChange) and c.applied for c in changes)
    assert usage(store) == {}
    assert store.node_holders() == {}


def test_concurrent_batches_apply_each_move_exactly_once(store: JobStore) -> None:
    job_ids = [f"wsjob-c{i}" for i in range(6)]
    for job_id in job_ids:
        submit(store, job_id)

    batches = run_together(
        4,
        lambda n: store.set_phases(
            [PhaseMove(j, Phase.CANCELLED, f"batch {n}", Phase.QUEUED) for j in job_ids],
            T0 + 1,
        ),
    )

    for index, job_id in enumerate(job_ids):
        changes = [batch[index] for batch in batches]
        applied = [c for c in changes if isinstance(c, PhaseChange) and c.applied]
        assert len(applied) == 1, changes
        assert all(
            isinstance(c, PhaseChange) and c.outcome in (Outcome.ALREADY, Outcome.LOST)
            for c in changes
            if c not in applied
        )
        assert store.events(job_id)[1:] == [applied[0].event]


def test_get_jobs_and_job_owners_read_what_get_job_reads(store: JobStore) -> None:
    submit(store, "wsjob-queued-1", labels={"team": "nlp"})
    submit(store, "wsjob-queued-2", now=T0 + 1, priority=Priority.P1)
    submit(store, "wsjob-sched", num_csx=2)
    store.schedule("wsjob-sched", placements_for(store, "wsjob-sched"), T0 + 1)
    store.update_replica("wsjob-sched", "cs2-1", phase="READY", pid=42)
    submit(store, "wsjob-done")
    drive(store, "wsjob-done", Phase.FAILED)
    job_ids = ["wsjob-queued-1", "wsjob-queued-2", "wsjob-sched", "wsjob-done"]

    jobs = {job.id: job for job in store.get_jobs([*job_ids, "wsjob-unknown"])}
    owners = store.job_owners([*job_ids, "wsjob-unknown"])

    assert jobs == {job_id: store.get_job(job_id) for job_id in job_ids}
    assert jobs["wsjob-sched"].replicas and jobs["wsjob-queued-1"].spec.params_yaml
    assert (jobs["wsjob-queued-2"].queue_position, jobs["wsjob-queued-1"].queue_position) == (1, 2)
    assert owners == {
        job_id: JobOwner(jobs[job_id].phase, jobs[job_id].user, jobs[job_id].groups)
        for job_id in job_ids
    }
