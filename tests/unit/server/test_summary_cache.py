"""The summaries cache of ListJobs/StreamJobs: cached bytes, fresh queue positions."""

from __future__ import annotations

import asyncio

from appliance._proto.v1 import cluster_pb2
from appliance.domain.job import Job
from appliance.domain.listing import JobKey
from appliance.domain.phases import Phase
from appliance.domain.spec import JobSpec
from appliance.protocol import convert
from appliance.server.grpc.summaries import SummaryCache

SPEC = JobSpec(params_yaml="", num_csx=1, num_steps=2)


class Store:
    """Summaries and queue positions, counting the summaries read."""

    def __init__(self, jobs: list[Job]) -> None:
        self.jobs = {job.id: job for job in jobs}
        self.positions: dict[str, int] = {}
        self.summaries_read: list[str] = []

    async def fetch(self, job_ids: list[str]) -> list[Job]:
        self.summaries_read += job_ids
        return [self.jobs[j] for j in job_ids]

    async def queue_positions(self, job_ids: list[str]) -> dict[str, int]:
        return {j: p for j, p in self.positions.items() if j in job_ids}


def _job(job_id: str, phase: Phase = Phase.QUEUED) -> Job:
    reason = "needs 1 system, 0 free" if phase is Phase.QUEUED else ""
    return Job(
        id=job_id, user="u", spec=SPEC, phase=phase, created_at=1.0, updated_at=1.0,
        pending_reason=reason,
    )  # fmt: skip


def _listed(cache: SummaryCache, keys: list[JobKey], store: Store) -> list[cluster_pb2.Job]:
    responses = asyncio.run(cache.responses(keys, store.fetch, store.queue_positions))
    return [job for response in responses for job in response.jobs]


def test_positions_are_fresh_on_every_call_while_summaries_come_from_the_cache() -> None:
    store = Store([_job("wsjob-a"), _job("wsjob-b"), _job("wsjob-c", Phase.RUNNING)])
    keys: list[JobKey] = [("wsjob-a", 1.0, 3), ("wsjob-b", 1.0, 3), ("wsjob-c", 1.0, 7)]
    cache = SummaryCache()

    store.positions = {"wsjob-a": 1, "wsjob-b": 2}
    first = _listed(cache, keys, store)
    store.positions = {"wsjob-a": 2, "wsjob-b": 1}  # b overtook a: no version changed
    second = _listed(cache, keys, store)

    assert store.summaries_read == ["wsjob-a", "wsjob-b", "wsjob-c"]  # read once, then cached
    assert [j.queue_position for j in first] == [1, 2, 0]
    assert [j.queue_position for j in second] == [2, 1, 0]
    assert [j.pending_reason for j in second] == ["needs 1 system, 0 free"] * 2 + [""]
    expected = convert.job_to_pb(store.jobs["wsjob-a"])
    expected.queue_position = 2
    assert second[0] == expected


def test_a_page_larger_than_the_cache_is_served_whole_with_its_positions() -> None:
    store = Store([_job(f"wsjob-{i}") for i in range(3)])
    store.positions = {f"wsjob-{i}": i + 1 for i in range(3)}
    keys: list[JobKey] = [(f"wsjob-{i}", 1.0, 1) for i in range(3)]
    cache = SummaryCache(max_entries=2)

    assert [j.queue_position for j in _listed(cache, keys, store)] == [1, 2, 3]
    assert [j.queue_position for j in _listed(cache, keys, store)] == [1, 2, 3]
    assert len(cache) == 2
