"""Which changed jobs a watch of a list query sends (services/job_watch.py)."""

from __future__ import annotations

import asyncio
import dataclasses

from appliance.domain.job import Job
from appliance.domain.listing import JobQuery
from appliance.domain.phases import Phase
from appliance.domain.selectors import parse_selector
from appliance.domain.spec import JobSpec
from appliance.services.job_watch import SharedReads, query_matches


def _job(phase: Phase = Phase.QUEUED, user: str = "alice", **labels: str) -> Job:
    spec = JobSpec(params_yaml="", num_csx=1, num_steps=1, labels=labels)
    return Job(id="wsjob-a", user=user, spec=spec, phase=phase, created_at=1.0, updated_at=1.0)


def test_a_watch_of_active_jobs_sends_an_ended_job_once_in_its_final_phase() -> None:
    active = JobQuery()
    done = _job(Phase.CANCELLED)

    assert query_matches(active, _job(Phase.RUNNING))
    assert query_matches(active, done, ended=True)  # the change that ended it
    assert not query_matches(active, done)  # a later change (its labels): not listed
    assert query_matches(JobQuery(include_terminal=True), done)
    assert not query_matches(JobQuery(phases=frozenset({Phase.QUEUED})), done, ended=True)


def test_user_labels_and_selector_filter_as_the_listing_does() -> None:
    query = JobQuery(
        user="alice", labels={"team": "nlp"}, selector=parse_selector("tmp notin (1),!skip")
    )

    assert query_matches(query, _job(team="nlp"))
    assert query_matches(query, _job(team="nlp", tmp="2"))
    assert not query_matches(query, _job(team="nlp", tmp="1"))
    assert not query_matches(query, _job(team="nlp", skip="y"))
    assert not query_matches(query, _job(team="cv"))
    assert not query_matches(query, _job(user="bob", team="nlp"))


class _Store:
    """A read that counts its calls, returns the state as of the moment it starts, and waits
    for `release` to finish (so a test can change the state while a read is in flight)."""

    def __init__(self) -> None:
        self.phase = Phase.QUEUED
        self.reads: list[list[str]] = []
        self.release = asyncio.Event()
        self.started = asyncio.Event()

    async def read(self, ids: list[str]) -> dict[str, Job]:
        self.reads.append(ids)
        self.started.set()
        phase = self.phase
        await self.release.wait()
        return {i: dataclasses.replace(_job(phase), id=i) for i in ids}


def test_watchers_woken_by_the_same_change_share_one_read() -> None:
    async def scenario() -> None:
        store = _Store()
        shared = SharedReads(store.read)
        waiters = [asyncio.ensure_future(shared.jobs([f"j{i % 3}"])) for i in range(128)]
        await store.started.wait()  # every waiter joined before the read started
        store.release.set()
        results = await asyncio.gather(*waiters)

        assert store.reads == [["j0", "j1", "j2"]]
        assert all(set(r) == {"j0", "j1", "j2"} for r in results)

    asyncio.run(scenario())


def test_a_watcher_told_of_a_change_after_a_read_started_gets_a_later_read() -> None:
    async def scenario() -> None:
        store = _Store()
        shared = SharedReads(store.read)
        first = asyncio.ensure_future(shared.jobs(["j"]))
        await store.started.wait()  # the first read has started, with the old state
        store.phase = Phase.RUNNING  # the change the second watcher is told of
        second = asyncio.ensure_future(shared.jobs(["j"]))
        store.release.set()

        assert (await first)["j"].phase is Phase.QUEUED
        assert (await second)["j"].phase is Phase.RUNNING
        assert len(store.reads) == 2

    asyncio.run(scenario())


def test_a_cancelled_watcher_leaves_the_read_to_the_others() -> None:
    async def scenario() -> None:
        store = _Store()
        shared = SharedReads(store.read)
        leaving = asyncio.ensure_future(shared.jobs(["a"]))
        staying = asyncio.ensure_future(shared.jobs(["b"]))
        await store.started.wait()
        leaving.cancel()
        store.release.set()

        assert set(await staying) == {"a", "b"}
        assert leaving.cancelled()

    asyncio.run(scenario())
