"""Replica writes of many jobs in one transaction (store/replica_batches.py), on every backend:
each registration, exit, start and progress report in a batch is decided as it would be alone,
and a job's exits are written only as far as the first one that may end the job."""

from __future__ import annotations

import pytest

from appliance.domain.errors import Conflict, NotFound
from appliance.domain.job import Progress, ReplicaPhase
from appliance.domain.phases import Phase
from appliance.store.jobs import JobStore
from appliance.store.replica_batches import Registered, Registration, ReplicaExit
from tests.integration.store.driving import T0, placements_for, submit

A, B = "wsjob-batch-a", "wsjob-batch-b"


def _started(store: JobStore, job_id: str, phase: Phase = Phase.INITIALIZING) -> list[str]:
    """Submit and schedule `job_id`, walk it on to `phase`; its replicas' names."""
    submit(store, job_id)
    store.schedule(job_id, placements_for(store, job_id), T0 + 1)
    path = [Phase.SCHEDULED, Phase.INITIALIZING, Phase.RUNNING]
    for step in path[1 : path.index(phase) + 1]:
        store.set_phase(job_id, step, f"to {step}", T0 + 2)
    return [r.name for r in store.replicas(job_id)]


def _phases(store: JobStore, job_id: str) -> dict[str, ReplicaPhase]:
    return {r.name: r.phase for r in store.replicas(job_id)}


def _exit(replica: str, code: int | None, *, attempt: int = 1) -> ReplicaExit:
    decisive = code != 0 or replica == "chief-0"
    return ReplicaExit(replica, attempt, code, f"exit {code}", f"tail of {replica}", decisive)


def test_registrations_in_a_batch_are_answered_each_as_alone(store: JobStore) -> None:
    names_a = _started(store, A)
    names_b = _started(store, B)
    version_a = store.job_version(A)[0]
    batch = [
        *(Registration(A, 1, name, f"10.0.0.1:{i}", 100 + i) for i, name in enumerate(names_a)),
        Registration(A, 1, names_a[0], "10.0.0.9:1", 7),  # again, elsewhere: the first wins
        Registration(B, 2, names_b[0], "10.0.0.2:1", 1),  # an attempt B never had
        Registration(B, 1, "cs2-99", "10.0.0.2:2", 2),  # no such replica
        Registration(B, 1, names_b[0], "10.0.0.2:3", 3),
    ]

    answers = store.register_replicas(batch, T0 + 3)

    count = len(names_a)
    assert answers[: count - 1] == [Registered(None, False, count)] * (count - 1)
    last = answers[count - 1]  # the last one makes the gang whole: the job runs, in that write
    assert isinstance(last, Registered) and (last.taken, last.all_ready) == (None, True)
    assert last.change is not None and last.change.applied
    assert store.get_job(A).phase is Phase.RUNNING
    assert store.events(A)[-1].reason == f"all {count} replicas ready"
    assert answers[count] == Registered("10.0.0.1:0", False, count)
    assert isinstance(answers[count + 1], Conflict)
    assert isinstance(answers[count + 2], NotFound)
    b = answers[count + 3]
    assert isinstance(b, Registered) and (b.taken, b.all_ready) == (None, len(names_b) == 1)
    assert set(_phases(store, A).values()) == {ReplicaPhase.READY}
    first = {r.name: (r.address, r.pid) for r in store.replicas(A)}[names_a[0]]
    assert first == ("10.0.0.1:0", 100)
    assert _phases(store, B)[names_b[0]] is ReplicaPhase.READY
    assert store.job_version(A)[0] > version_a  # cached full views see the change
    counts = store.replicas_ready([A, B, "wsjob-nosuchjob"])
    assert counts == {A: (count, count), B: (1, len(names_b))}


def test_exits_are_written_up_to_the_first_that_may_end_the_job(store: JobStore) -> None:
    names = _started(store, A, Phase.RUNNING)
    workers = [n for n in names if n != "chief-0"]
    exits = [*(_exit(n, 0) for n in workers[:-1]), _exit("chief-0", 0), _exit(workers[-1], 0)]

    [written] = store.record_exits([(A, exits)], T0 + 3)

    assert written.count == len(workers)  # the plain ones, then the chief: the rest waits
    assert written.state is not None and written.state.phase is Phase.RUNNING
    assert written.change is not None and written.change.applied  # the chief finished it
    job = store.get_job(A)
    assert (job.phase, job.reason) == (Phase.SUCCEEDED, "chief finished all steps")
    phases = _phases(store, A)
    assert all(phases[n] is ReplicaPhase.SUCCEEDED for n in [*workers[:-1], "chief-0"])
    assert phases[workers[-1]] is not ReplicaPhase.SUCCEEDED
    [chief] = [r for r in store.replicas(A) if r.name == "chief-0"]
    assert (chief.exit_code, chief.message, chief.log_tail) == (0, "exit 0", "tail of chief-0")


def test_a_failure_stops_the_batch_and_after_the_end_it_reads_stopped(store: JobStore) -> None:
    names = _started(store, A, Phase.RUNNING)
    worker = next(n for n in names if n != "chief-0")

    [written] = store.record_exits([(A, [_exit(worker, 137), _exit("chief-0", 143)])], T0 + 3)

    assert written.count == 1 and written.change is None  # a failure is the caller's to act on
    assert _phases(store, A)[worker] is ReplicaPhase.FAILED
    assert store.get_job(A).phase is Phase.RUNNING
    store.set_phase(A, Phase.FAILED, "a replica failed", T0 + 3)
    [written] = store.record_exits([(A, [_exit("chief-0", 143)])], T0 + 4)
    assert written.count == 1 and written.state is not None and written.state.phase.terminal
    assert _phases(store, A)["chief-0"] is ReplicaPhase.STOPPED  # the teardown's doing


def test_a_replica_the_teardown_stops_after_success_says_it_ended_as_it_should(
    store: JobStore,
) -> None:
    names = _started(store, A, Phase.RUNNING)
    worker = next(n for n in names if n != "chief-0")
    [written] = store.record_exits([(A, [_exit("chief-0", 0)])], T0 + 3)
    assert written.change is not None and store.get_job(A).phase is Phase.SUCCEEDED

    store.record_exits([(A, [ReplicaExit(worker, 1, 143, "killed by SIGTERM", "", True)])], T0 + 4)
    [stopped] = [r for r in store.replicas(A) if r.name == worker]
    assert (stopped.phase, stopped.exit_code) == (ReplicaPhase.STOPPED, 143)
    assert stopped.message == (
        "stopped by the teardown after the job succeeded (killed by SIGTERM)"
    )


def test_no_exit_is_written_for_a_requeue_another_attempt_or_no_job(store: JobStore) -> None:
    names = _started(store, A, Phase.RUNNING)
    _started(store, B, Phase.RUNNING)
    store.request_requeue(B, 1, "preempted", T0 + 3)
    before = _phases(store, A)

    answers = store.record_exits(
        [
            (A, [_exit(names[0], 0, attempt=2)]),
            (B, [_exit("chief-0", 0)]),
            ("wsjob-nosuchjob", [_exit("chief-0", 0)]),
        ],
        T0 + 4,
    )

    assert [a.count for a in answers] == [0, 0, 0]
    assert answers[1].state is not None and answers[1].state.stopping
    assert answers[2].state is None
    assert _phases(store, A) == before


def test_starts_move_only_pending_replicas(store: JobStore) -> None:
    names = _started(store, A, Phase.SCHEDULED)
    store.register_replicas([Registration(A, 1, names[0], "10.0.0.1:1", 5)], T0 + 3)

    store.mark_started([(A, name, 40 + i) for i, name in enumerate(names)])

    phases = _phases(store, A)
    assert phases[names[0]] is ReplicaPhase.READY  # registered first: a late start leaves it
    assert all(phases[n] is ReplicaPhase.STARTED for n in names[1:])
    assert {r.name: r.pid for r in store.replicas(A)}[names[-1]] == 40 + len(names) - 1


@pytest.mark.parametrize("phase", [Phase.INITIALIZING, Phase.RUNNING])
def test_progress_is_written_for_the_attempt_that_holds_its_systems(
    store: JobStore, phase: Phase
) -> None:
    _started(store, A, phase)
    progress = Progress(step=3, num_steps=100, loss=0.5, checkpoint_step=2)

    answers = store.record_progress(
        [(A, 1, progress), (A, 2, Progress(step=9)), ("wsjob-nosuchjob", 1, progress)]
    )

    assert [written for written, _ in answers] == [True, False, False]
    assert answers[0][1] is not None and answers[0][1].phase is phase
    assert answers[2][1] is None
    assert store.get_job(A).progress.step == 3
    store.set_phase(A, Phase.CANCELLED, "cancelled", T0 + 3)
    assert not store.set_progress(A, 1, Progress(step=4))  # over: nothing written
    assert store.get_job(A).progress.step == 3


def test_progress_of_many_jobs_is_written_in_one_batch(store: JobStore) -> None:
    for job_id in (A, B):
        _started(store, job_id, Phase.RUNNING)

    answers = store.record_progress([(A, 1, Progress(step=5)), (B, 1, Progress(step=7))])

    assert [written for written, _ in answers] == [True, True]
    assert (store.get_job(A).progress.step, store.get_job(B).progress.step) == (5, 7)


def test_a_data_plane_is_written_only_when_it_changed_and_only_by_its_attempt(
    store: JobStore,
) -> None:
    names = _started(store, A, Phase.RUNNING)
    _started(store, B, Phase.RUNNING)
    version = store.job_version(A)[0]

    said = "shared memory: swarmx-0; grpc: none"
    assert store.set_data_planes([(A, 1, names[0], said)]) == [True]
    assert store.job_version(A)[0] == version + 1  # cached full views see the change
    assert {r.name: r.data_plane for r in store.replicas(A)}[names[0]] == said
    assert store.get_job(A).replicas[0].data_plane == said

    unchanged = store.set_data_planes([(A, 1, names[0], said)] * 2)
    assert unchanged == [False, False]
    assert store.job_version(A)[0] == version + 1  # no write: no new version

    batch = [
        (A, 1, names[0], "grpc: swarmx-0"),  # changed
        (A, 2, names[-1], "grpc: from an attempt A never had"),
        (A, 1, "cs2-99", "grpc: no such replica"),
        (B, 1, names[0], "grpc: of B"),
    ]
    assert store.set_data_planes(batch) == [True, False, False, True]
    assert {r.name: r.data_plane for r in store.replicas(A)} == {
        name: "grpc: swarmx-0" if name == names[0] else "" for name in names
    }
    assert store.replicas(B)[0].data_plane == "grpc: of B"

    store.set_phase(A, Phase.FAILED, "over", T0 + 3)
    assert store.set_data_planes([(A, 1, names[0], "grpc: after the end")]) == [False]
    assert store.replicas(A)[0].data_plane == "grpc: swarmx-0"
