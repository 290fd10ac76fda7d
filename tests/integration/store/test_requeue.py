"""The JobStore contract for a requeue: a job that must run again goes back to QUEUED from a
resource-holding phase, in one transaction giving back what it held, dropping that attempt's
replicas and recording the attempt; it keeps its place in the queue; the next schedule begins
the next attempt. Run against every backend."""

from __future__ import annotations

import pytest

from appliance.domain.job import Attempt, Progress
from appliance.domain.phase_moves import PhaseChange
from appliance.domain.phases import Phase
from appliance.store.jobs import JobStore
from tests.integration.store.driving import PATH_TO, T0, placements_for, submit, usage


def _schedule(store: JobStore, job_id: str, now: float) -> None:
    assert store.schedule(job_id, placements_for(store, job_id), now).applied


@pytest.mark.parametrize(
    "holding", [Phase.SCHEDULED, Phase.INITIALIZING, Phase.RUNNING], ids=lambda p: str(p).lower()
)
def test_a_requeue_gives_everything_back_and_records_the_attempt(
    store: JobStore, holding: Phase
) -> None:
    submit(store, "wsjob-a", num_csx=2)
    _schedule(store, "wsjob-a", T0 + 1)
    for step in PATH_TO[holding][1:]:
        assert store.set_phase("wsjob-a", step, "on", T0 + 2).applied
    assert usage(store) and store.replicas("wsjob-a")

    reason = "replica cs2-1 exited with exit code 137"
    change = store.set_phase("wsjob-a", Phase.QUEUED, reason, T0 + 5, expected=holding)

    assert change.applied and change.event is not None
    assert (change.event.from_phase, change.event.to_phase) == (holding, Phase.QUEUED)
    assert usage(store) == {}  # every system, MemoryX byte and SwarmX port given back
    assert store.replicas("wsjob-a") == []  # the next schedule makes the next attempt's
    job = store.get_job("wsjob-a")
    assert (job.phase, job.attempt, job.pending_reason) == (Phase.QUEUED, 1, reason)
    started = T0 + 2 if holding is Phase.RUNNING else 0.0
    assert store.attempts("wsjob-a") == [
        Attempt(1, T0 + 1, started, T0 + 5, ("cs2-01", "cs2-02"), reason, Phase.QUEUED)
    ]


def test_a_requeued_job_keeps_its_place_and_runs_as_the_next_attempt(store: JobStore) -> None:
    submit(store, "wsjob-a", num_csx=4)
    submit(store, "wsjob-b", num_csx=4, now=T0 + 1)
    _schedule(store, "wsjob-a", T0 + 2)
    assert store.set_phase("wsjob-a", Phase.QUEUED, "preempted", T0 + 3).applied

    # Submitted first, it is ahead of wsjob-b again: its place is its submit time.
    assert [q.job_id for q in store.queued_jobs()] == ["wsjob-a", "wsjob-b"]
    _schedule(store, "wsjob-a", T0 + 4)
    for step in (Phase.INITIALIZING, Phase.RUNNING, Phase.SUCCEEDED):
        assert store.set_phase("wsjob-a", step, "on", T0 + 5).applied
    job = store.get_job("wsjob-a")
    systems = ("cs2-01", "cs2-02", "cs2-03", "cs2-04")
    assert (job.attempt, job.systems, job.started_at) == (2, systems, T0 + 5)
    assert len(job.replicas) == 7  # chief, 4 cs2, memoryx, swarmx: made again once
    assert [(a.number, a.ended_in, a.reason) for a in store.attempts("wsjob-a")] == [
        (1, Phase.QUEUED, "preempted"),
        (2, Phase.SUCCEEDED, "on"),
    ]
    assert usage(store) == {}


def test_a_job_never_scheduled_has_no_attempt_and_a_finished_one_is_never_requeued(
    store: JobStore,
) -> None:
    submit(store, "wsjob-a")
    assert not store.set_phase("wsjob-a", Phase.QUEUED, "again", T0 + 1).applied  # already
    assert store.set_phase("wsjob-a", Phase.CANCELLED, "no", T0 + 2).applied
    assert (store.get_job("wsjob-a").attempt, store.attempts("wsjob-a")) == (0, [])
    assert not store.set_phase("wsjob-a", Phase.QUEUED, "again", T0 + 3).applied
    assert store.get_job("wsjob-a").phase is Phase.CANCELLED


def test_an_attempt_being_stopped_still_records_its_progress_and_a_requeued_one_no_longer(
    store: JobStore,
) -> None:
    """A checkpoint the chief reports after a restart was decided is the one the next attempt
    resumes from; once queued again, a late report of that attempt writes nothing."""
    submit(store, "wsjob-a", num_csx=1)
    _schedule(store, "wsjob-a", T0 + 1)
    for step in PATH_TO[Phase.RUNNING][1:]:
        assert store.set_phase("wsjob-a", step, "on", T0 + 2).applied
    assert store.request_requeue("wsjob-a", 1, "cs2-0 exited", T0 + 3, retry=True)[0]
    assert store.set_progress("wsjob-a", 1, Progress(step=201, num_steps=900, checkpoint_step=200))
    assert store.get_job("wsjob-a").progress.checkpoint_step == 200
    assert store.requeue_now("wsjob-a", 1, "cs2-0 exited; requeued", T0 + 4)
    assert not store.set_progress("wsjob-a", 1, Progress(step=260, num_steps=900))
    assert store.get_job("wsjob-a").progress.step == 201


def test_a_requeue_request_is_bound_to_its_attempt_and_cleared_by_the_requeue(
    store: JobStore,
) -> None:
    """The request outlives a coordinator (it is in the store) but not its attempt: the phase
    writer clears it with the move back to QUEUED, and a request or a checkpoint report for an
    attempt that is over writes nothing."""
    submit(store, "wsjob-a", num_csx=1)
    _schedule(store, "wsjob-a", T0 + 1)
    for step in PATH_TO[Phase.RUNNING][1:]:
        assert store.set_phase("wsjob-a", step, "on", T0 + 2).applied
    assert store.request_requeue("wsjob-a", 2, "stale", T0 + 3) == (False, None)
    written, event = store.request_requeue(
        "wsjob-a", 1, "preempted by wsjob-b (P1)", T0 + 3, checkpoint_by=T0 + 33,
        preempted_by="wsjob-b",
    )  # fmt: skip
    assert written and event is not None and event.to_phase is Phase.RUNNING
    assert event.reason == "preempted by wsjob-b (P1); asked for a checkpoint within 30 s"
    assert store.request_requeue("wsjob-a", 1, "again", T0 + 4) == (False, None)  # one at a time
    state = store.stop_state("wsjob-a")
    assert state is not None and (state.stopping, state.checkpoint_wanted) == (True, True)
    assert store.record_checkpoint_now("wsjob-a", 2, 40, T0 + 4) == (False, None)
    assert store.record_checkpoint_now("wsjob-a", 1, 40, T0 + 4) == (True, None)
    assert store.record_checkpoint_now("wsjob-a", 1, 41, T0 + 4) == (False, None)  # the first
    (request,) = store.requeue_requests()
    assert (request.checkpoint_step, request.preempted_by) == (40, "wsjob-b")
    [victim] = store.running_jobs(min_run_seconds=60)
    assert victim.stopping and victim.preempted_by == "wsjob-b"

    assert store.requeue_now("wsjob-a", 2, "a later attempt", T0 + 5) == []
    (requeued,) = store.requeue_now("wsjob-a", 1, "preempted", T0 + 5)
    assert isinstance(requeued, PhaseChange) and requeued.applied
    assert store.requeue_now("wsjob-a", 1, "again", T0 + 5) == []  # done once
    assert store.requeue_requests() == []
    state = store.stop_state("wsjob-a")
    assert state is not None and not state.stopping
    _schedule(store, "wsjob-a", T0 + 6)
    assert not store.set_progress("wsjob-a", 1, Progress(step=99))  # attempt 1 is over
    assert store.set_progress("wsjob-a", 2, Progress(step=1, resumed_from_step=40))
    for step in PATH_TO[Phase.RUNNING][1:]:
        assert store.set_phase("wsjob-a", step, "on", T0 + 7).applied
    # A job preempted before is protected for the minimum run time of its new attempt.
    [again] = store.running_jobs(min_run_seconds=60)
    assert again.protected_until == T0 + 7 + 60 and not again.stopping
    assert store.set_phase("wsjob-a", Phase.SUCCEEDED, "done", T0 + 8).applied
    assert [a.resumed_from for a in store.attempts("wsjob-a")] == [0, 40]


def test_a_checkpoint_asked_at_the_last_step_lets_the_job_finish(store: JobStore) -> None:
    """A chief asked for a checkpoint as it finished its last step has nothing left to resume:
    the requeue is withdrawn (and the preemption not counted) and the job ends where it is."""
    submit(store, "wsjob-a", num_csx=1)  # of 100 steps
    _schedule(store, "wsjob-a", T0 + 1)
    for step in PATH_TO[Phase.RUNNING][1:]:
        assert store.set_phase("wsjob-a", step, "on", T0 + 2).applied
    store.request_requeue(
        "wsjob-a", 1, "preempted by wsjob-b (P1)", T0 + 3, checkpoint_by=T0 + 33,
        preempted_by="wsjob-b",
    )  # fmt: skip

    recorded, event = store.record_checkpoint_now("wsjob-a", 1, 100, T0 + 4)

    assert recorded and event is not None and event.to_phase is Phase.RUNNING
    assert event.reason == "preemption by wsjob-b withdrawn: the job reached its last step"
    assert store.requeue_requests() == []
    state = store.stop_state("wsjob-a")
    assert state is not None and not state.stopping and not state.checkpoint_wanted
    [running] = store.running_jobs(min_run_seconds=60)  # never preempted: not protected
    assert (running.stopping, running.protected_until) == (False, 0.0)
    assert store.set_phase("wsjob-a", Phase.SUCCEEDED, "done", T0 + 5).applied
