"""The JobStore contract for reason codes, on every backend: a move's code is stored with the
job (why it ended, why it waits) and with its event, a requeue keeps its code from request to
move, and a list filters on the codes in the store's query."""

from __future__ import annotations

from appliance.domain.listing import JobQuery
from appliance.domain.phases import Phase
from appliance.domain.reasons import ReasonCode, said
from appliance.store.jobs import JobStore
from tests.integration.store.driving import T0, drive, submit


def _codes(store: JobStore, query: JobQuery) -> list[str]:
    keys, _ = store.list_job_keys(query)
    return sorted(key[0] for key in keys)


def test_codes_are_stored_with_the_job_and_its_events(store: JobStore) -> None:
    submit(store, "wsjob-a")
    job = store.get_job("wsjob-a")
    assert (job.pending_reason, job.pending_reason_code) == (
        "waiting for the scheduler",
        "Scheduler",
    )
    assert store.events("wsjob-a")[0].reason_code == "Submitted"

    drive(store, "wsjob-a", Phase.RUNNING)
    failed = said(ReasonCode.REPLICA_FAILED, replica="cs2-0", exit_code=137, message="")
    change = store.set_phase("wsjob-a", Phase.FAILED, failed, T0 + 2)
    assert change.event is not None and change.event.reason_code == "ReplicaFailed"
    job = store.get_job("wsjob-a")
    assert (job.reason, job.reason_code) == (
        "replica cs2-0 exited with exit code 137",
        "ReplicaFailed",
    )
    assert job.pending_reason_code == ""
    [summary] = store.job_summaries(["wsjob-a"])
    assert summary.reason_code == "ReplicaFailed"
    assert store.events("wsjob-a")[-1].reason_code == "ReplicaFailed"


def test_a_requeue_keeps_its_code_from_request_to_the_queue(store: JobStore) -> None:
    submit(store, "wsjob-a")
    drive(store, "wsjob-a", Phase.RUNNING)
    preempted = said(ReasonCode.PREEMPTED, by="wsjob-b", priority="P1")
    written, event = store.request_requeue(
        "wsjob-a", 1, preempted, T0 + 3, checkpoint_by=T0 + 33, preempted_by="wsjob-b"
    )
    assert written and event is not None and event.reason_code == "Preempted"
    assert event.reason == "preempted by wsjob-b (P1); asked for a checkpoint within 30 s"
    (request,) = store.requeue_requests()
    assert request.said.code is ReasonCode.PREEMPTED
    (_moved,) = store.requeue_now("wsjob-a", 1, request.said.but(position=1), T0 + 4)
    job = store.get_job("wsjob-a")
    assert (job.phase, job.pending_reason_code) == (Phase.QUEUED, "Preempted")
    assert job.pending_reason == "preempted by wsjob-b (P1); requeued at position 1"


def test_a_condition_says_why_a_scheduled_job_waits_with_its_code(store: JobStore) -> None:
    submit(store, "wsjob-a")
    drive(store, "wsjob-a", Phase.SCHEDULED)
    waiting = said(ReasonCode.BACKEND, error="the API is down")
    assert store.set_condition("wsjob-a", Phase.SCHEDULED, waiting)
    assert not store.set_condition("wsjob-a", Phase.SCHEDULED, waiting)  # unchanged
    assert store.get_job("wsjob-a").pending_reason_code == "Backend"


def test_a_list_filters_on_the_reason_and_the_pending_reason(store: JobStore) -> None:
    for i, name in enumerate(("queued", "other", "user", "admin", "failed")):
        submit(store, f"wsjob-{name}", now=T0 + i)
    by_user = said(ReasonCode.CANCELLED_BY_USER, by="alice")
    by_admin = said(ReasonCode.CANCELLED_BY_ADMIN, by="root")
    store.set_phase("wsjob-user", Phase.CANCELLED, by_user, T0 + 9)
    store.set_phase("wsjob-admin", Phase.CANCELLED, by_admin, T0 + 9)
    drive(store, "wsjob-failed", Phase.RUNNING)
    store.set_phase("wsjob-failed", Phase.FAILED, said(ReasonCode.LAUNCH_FAILED, error="x"), T0)

    cancelled = {ReasonCode.CANCELLED_BY_USER, ReasonCode.CANCELLED_BY_ADMIN}
    # Ended jobs match without include_terminal: why a job ended is a reason.
    assert _codes(store, JobQuery(reasons=frozenset(cancelled))) == ["wsjob-admin", "wsjob-user"]
    assert _codes(store, JobQuery(reasons=frozenset({ReasonCode.LAUNCH_FAILED}))) == [
        "wsjob-failed"
    ]
    scheduler = frozenset({ReasonCode.SCHEDULER})
    assert _codes(store, JobQuery(reasons=scheduler)) == ["wsjob-other", "wsjob-queued"]
    # The list use case's view of the queue: the scheduler said why wsjob-queued waits (not
    # Scheduler any more), and never decided on wsjob-other (its row's code holds).
    capacity = frozenset({ReasonCode.CAPACITY})
    decided = JobQuery(
        reasons=capacity, waiting=frozenset({"wsjob-queued"}), undecided=frozenset()
    )
    assert _codes(store, decided) == ["wsjob-queued"]
    fresh = JobQuery(reasons=scheduler, waiting=frozenset(), undecided=frozenset({"wsjob-other"}))
    assert _codes(store, fresh) == ["wsjob-other"]
    # A page at a time, as a paged listing asks.
    first, token = store.list_job_keys(JobQuery(reasons=frozenset(cancelled), limit=1))
    second, end = store.list_job_keys(
        JobQuery(reasons=frozenset(cancelled), limit=1, page_token=token)
    )
    assert [k[0] for k in first + second] == ["wsjob-admin", "wsjob-user"] and end == ""


def test_many_waiting_jobs_are_one_parameter(store: JobStore) -> None:
    submit(store, "wsjob-a")
    many = frozenset({"wsjob-a"} | {f"wsjob-{i:06d}" for i in range(40_000)})
    query = JobQuery(reasons=frozenset({ReasonCode.CAPACITY}), waiting=many)
    assert _codes(store, query) == ["wsjob-a"]
