"""Watching and waiting on a job, including resuming a broken stream."""

from __future__ import annotations

import pytest
from fake_cluster_service import FakeCluster

from appliance._proto.v1 import cluster_pb2
from appliance.client import ApplianceClient, JobCancelled, JobFailed, WatchRetry
from appliance.client.watch import watch_job_events
from appliance.domain.errors import NotFound, Unavailable
from appliance.domain.job import EventKind
from appliance.domain.phases import Phase


def test_watch_yields_live_events_and_ends_at_the_terminal_phase(
    client: ApplianceClient, cluster: FakeCluster
) -> None:
    job_id = cluster.service.add_job().id
    events = client.job(job_id).watch()

    first = next(events)
    cluster.service.transition(job_id, Phase.RUNNING)
    second = next(events)
    cluster.service.report_progress(job_id, step=3)
    third = next(events)
    cluster.service.transition(job_id, Phase.SUCCEEDED)
    rest = list(events)

    assert first.to_phase is Phase.QUEUED
    assert (second.from_phase, second.to_phase) == (Phase.QUEUED, Phase.RUNNING)
    assert third.kind is EventKind.PROGRESS and third.progress is not None
    assert third.progress.step == 3
    assert [event.to_phase for event in rest] == [Phase.SUCCEEDED]


def test_wait_returns_the_final_job_when_it_succeeded(
    client: ApplianceClient, cluster: FakeCluster
) -> None:
    job_id = cluster.service.add_job(phase=Phase.SUCCEEDED).id

    final = client.job(job_id).wait(timeout=10)

    assert (final.id, final.phase) == (job_id, Phase.SUCCEEDED)


def test_wait_raises_job_failed_carrying_the_job(
    client: ApplianceClient, cluster: FakeCluster
) -> None:
    job_id = cluster.service.add_job(phase=Phase.RUNNING).id
    cluster.service.transition(job_id, Phase.FAILED, "cs2-1 exited with code 3")

    with pytest.raises(JobFailed, match="cs2-1 exited with code 3") as raised:
        client.job(job_id).wait(timeout=10)

    assert raised.value.job.phase is Phase.FAILED


def test_wait_raises_job_cancelled(client: ApplianceClient, cluster: FakeCluster) -> None:
    job_id = cluster.service.add_job(phase=Phase.CANCELLED).id

    with pytest.raises(JobCancelled):
        client.job(job_id).wait(timeout=10)


def test_wait_times_out_while_the_job_is_still_active(
    client: ApplianceClient, cluster: FakeCluster
) -> None:
    job_id = cluster.service.add_job(phase=Phase.RUNNING).id

    with pytest.raises(TimeoutError, match=f"{job_id} to finish \\(still RUNNING\\)"):
        client.job(job_id).wait(timeout=0.3)


def test_watch_of_an_unknown_job_is_not_found(client: ApplianceClient) -> None:
    with pytest.raises(NotFound):
        list(client.watch("wsjob-doesnotexist1"))


def test_a_broken_stream_resumes_after_the_last_seen_event(
    client: ApplianceClient, cluster: FakeCluster
) -> None:
    job_id = cluster.service.add_job(phase=Phase.RUNNING).id
    cluster.service.transition(job_id, Phase.SUCCEEDED)
    cluster.service.break_next_watch_after(2)

    phases = [event.to_phase for event in client.watch(job_id)]

    assert phases == [Phase.QUEUED, Phase.RUNNING, Phase.SUCCEEDED]
    requests = cluster.service.requests_of("WatchJob")
    after = [r.after_seq for r in requests if isinstance(r, cluster_pb2.WatchJobRequest)]
    assert after == [0, 2]


def test_watch_against_an_unreachable_server_fails_at_once(dead_address: str) -> None:
    with ApplianceClient(dead_address) as client, pytest.raises(Unavailable) as raised:
        list(client.watch("wsjob-abcdefabcdef12"))

    assert dead_address in raised.value.message


def test_a_watch_rides_out_an_outage_and_says_so(
    client: ApplianceClient, cluster: FakeCluster
) -> None:
    """A coordinator restart: several reopened streams refused before one gets through."""
    job_id = cluster.service.add_job(phase=Phase.RUNNING).id
    cluster.service.transition(job_id, Phase.SUCCEEDED)
    cluster.service.break_next_watch_after(1)
    cluster.service.refuse_watches(4)
    said: list[str] = []

    phases = [event.to_phase for event in client.watch(job_id, notify=said.append)]

    assert phases == [Phase.QUEUED, Phase.RUNNING, Phase.SUCCEEDED]  # none twice, none lost
    assert len(cluster.service.requests_of("WatchJob")) == 6
    assert len(said) == 2, said
    assert said[0].startswith(f"the coordinator at {client.address} is unreachable")
    assert "retrying for up to 2 s" in said[0]
    assert said[1] == f"the coordinator at {client.address} is back; following {job_id} again"


def test_a_watch_gives_up_once_the_outage_outlasts_its_bound(cluster: FakeCluster) -> None:
    """The bound is time, not tries: with the clock injected, no test waits for it."""
    job_id = cluster.service.add_job(phase=Phase.RUNNING).id
    cluster.service.break_next_watch_after(1)
    cluster.service.refuse_watches(1_000)
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    with ApplianceClient(cluster.address) as client:
        events = watch_job_events(
            client._stub, job_id, address=cluster.address, retry=WatchRetry(),
            give_up_after=50.0, notify=lambda text: None, sleep=sleep, clock=lambda: now[0],
        )  # fmt: skip
        with pytest.raises(Unavailable, match="has been unreachable for 50 s"):
            list(events)
    assert now[0] == pytest.approx(50.0)


def test_a_held_job_is_watched_through_an_outage_as_long_as_its_lease_lasts(
    cluster: FakeCluster,
) -> None:
    """Its lease still runs for lease_seconds less one heartbeat interval after the last
    heartbeat that got through; a detached job has no lease to lose."""
    params = {"model": {"name": "fc_mnist"}}
    with ApplianceClient(cluster.address, lease_seconds=30, heartbeat_interval=5) as client:
        held = client.submit(params=params, num_csx=1, num_steps=5)
        detached = client.submit(params=params, num_csx=1, num_steps=5, detach=True)
        for job, bound in ((held, "25 s"), (detached, "120 s")):
            cluster.service.transition(job.id, Phase.CANCELLED)
            cluster.service.break_next_watch_after(1)
            said: list[str] = []
            list(job.watch(notify=said.append))
            assert f"retrying for up to {bound}" in said[0], said
