"""GET of one job is served from a cache of full views keyed by (job id, version), read on a
reader thread beside SQLite's single writer: it must never show a stale job.

The REST tests change a job through every door that changes what GET shows; the service tests
drive JobService over a real store (SQLite and PostgreSQL) for what the API cannot reach alone
(replica changes, progress, the queue order of a batch submitted at one instant).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from appliance.domain.inventory import default_pool
from appliance.domain.job import Job, Progress, ReplicaPhase
from appliance.domain.phases import Phase
from appliance.domain.plan import plan_replicas
from appliance.domain.spec import Priority, validate_spec
from appliance.scheduler.admission import admit
from appliance.services.bus import JobBus
from appliance.services.context import Context
from appliance.services.job_views import JobViewCache
from appliance.services.jobs import JobService
from appliance.services.model_dirs import ModelDirs
from appliance.store.engine import make_engine, migrate
from appliance.store.jobs import JobStore, NewJob
from tests.integration.coordinator.harness import wait_until
from tests.integration.rest.conftest import Rest

PARAMS = "model: {name: fc_mnist, hidden_sizes: [4]}\n"
NOW = 1_700_000_000.0
WAITING_FOR_THE_SCHEDULER = "waiting for the scheduler"  # the reason a job is submitted with


# ---- through the REST API -------------------------------------------------------------------


def test_queue_position_follows_the_jobs_ahead(parked: Rest) -> None:
    first, second = parked.submit(), parked.submit()
    position = parked.job(second["id"])["queue_position"]
    assert parked.job(second["id"])["queue_position"] == position  # the cached view
    parked.http.post(f"/api/v1/jobs/{first['id']}/cancel")
    # The second job's own version did not change; its position did.
    assert parked.job(second["id"])["queue_position"] == position - 1
    parked.http.post(f"/api/v1/jobs/{second['id']}/cancel")
    assert parked.job(second["id"])["queue_position"] == 0


def test_every_change_shows_on_the_next_get(parked: Rest) -> None:
    job = parked.submit(labels={"team": "nlp"})
    url = f"/api/v1/jobs/{job['id']}"
    # The scheduler's first pass replaces the submit's reason with why the job waits (a change,
    # so a new view); after it nothing changes the job until this test does.
    wait_until(
        lambda: parked.job(job["id"])["pending_reason"] != WAITING_FOR_THE_SCHEDULER,
        what="the scheduler's first pass over the job",
    )
    assert parked.job(job["id"]) == parked.job(job["id"])
    assert parked.http.patch(url, json={"priority": "p1"}).status_code == 200
    assert parked.job(job["id"])["spec"]["priority"] == "P1"
    labels = {"labels": {"set": {"team": "cv"}, "remove": []}}
    assert parked.http.patch(url, json=labels).status_code == 200
    assert parked.job(job["id"])["spec"]["labels"] == {"team": "cv"}
    parked.http.post(f"{url}/cancel", json={"reason": "view test"})
    seen = parked.job(job["id"])
    assert (seen["phase"], seen["reason"], seen["queue_position"]) == ("CANCELLED", "view test", 0)


def test_an_unknown_job_is_not_found(parked: Rest) -> None:
    response = parked.http.get("/api/v1/jobs/wsjob-0000000000views")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


# ---- JobService over a real store -----------------------------------------------------------


@pytest.fixture
async def ctx(store_url: str) -> AsyncIterator[Context]:
    engine = make_engine(store_url)
    migrate(engine)
    store = JobStore(engine)
    store.sync_pool(default_pool())
    writer = ThreadPoolExecutor(1, thread_name_prefix="test-store")
    reader = ThreadPoolExecutor(1, thread_name_prefix="test-store-read")
    try:
        yield Context(store=store, bus=JobBus(), executor=writer, reader=reader)
    finally:
        writer.shutdown(wait=True)
        reader.shutdown(wait=True)
        engine.dispose()


@pytest.fixture
def service(ctx: Context, tmp_path: Path) -> JobService:
    return JobService(ctx, ModelDirs(tmp_path / "data" / "model_dirs"))


def _new(job_id: str, priority: Priority = Priority.P2) -> NewJob:
    spec = validate_spec(params_yaml=PARAMS, num_csx=1, num_steps=5, priority=priority)
    return NewJob(job_id, "alice", spec, plan_replicas(spec, default_pool()))


async def test_replica_and_progress_changes_are_never_served_stale(
    ctx: Context, service: JobService
) -> None:
    store = ctx.store
    store.create_jobs([_new("wsjob-viewreplicas01")], NOW)
    queued = await service.get("wsjob-viewreplicas01")
    assert queued.phase is Phase.QUEUED and queued.queue_position == 1 and not queued.replicas

    placements = admit(store.queued_jobs(), store.pool_usage()).admitted[0].placements
    assert store.schedule("wsjob-viewreplicas01", placements, NOW + 1).applied
    scheduled = await service.get("wsjob-viewreplicas01")
    assert scheduled.phase is Phase.SCHEDULED and scheduled.queue_position == 0
    assert {r.phase for r in scheduled.replicas} == {ReplicaPhase.PENDING}
    assert await service.get("wsjob-viewreplicas01") == scheduled  # served from the cache

    name = scheduled.replicas[0].name
    assert store.update_replica("wsjob-viewreplicas01", name, phase="STARTED", pid=4242)
    replica = {r.name: r for r in (await service.get("wsjob-viewreplicas01")).replicas}[name]
    assert (replica.phase, replica.pid) == (ReplicaPhase.STARTED, 4242)
    assert store.update_replica("wsjob-viewreplicas01", name, message="still warming up")
    replica = {r.name: r for r in (await service.get("wsjob-viewreplicas01")).replicas}[name]
    assert replica.message == "still warming up"

    for phase in (Phase.INITIALIZING, Phase.RUNNING):
        assert store.set_phase("wsjob-viewreplicas01", phase, "", NOW + 2).applied
    store.set_progress("wsjob-viewreplicas01", 1, Progress(step=3, num_steps=5, loss=0.5))
    running = await service.get("wsjob-viewreplicas01")
    assert running.phase is Phase.RUNNING and running.progress.step == 3
    assert running == store.get_job("wsjob-viewreplicas01")


async def test_queue_positions_in_queue_order(ctx: Context, service: JobService) -> None:
    store = ctx.store
    # One batch: the same created_at for all, so the order falls to priority, then id.
    ids = [f"wsjob-viewqueue0000{i}" for i in range(4)]
    priorities = [Priority.P3, Priority.P1, Priority.P2, Priority.P1]
    store.create_jobs([_new(i, p) for i, p in zip(ids, priorities, strict=True)], NOW)
    expected = sorted(ids, key=lambda i: (int(priorities[ids.index(i)]), i))
    for position, job_id in enumerate(expected, start=1):
        assert (await service.get(job_id)).queue_position == position
        assert store.get_job(job_id).queue_position == position
    store.set_priority(ids[0], Priority.P0, NOW + 1)  # the last job jumps the queue
    ctx.backlog.mark(ids[0])  # as JobService.set_priority does
    assert (await service.get(ids[0])).queue_position == 1
    assert (await service.get(expected[0])).queue_position == 2


# ---- the cache alone ------------------------------------------------------------------------


def _job(job_id: str, reason: str = "") -> Job:
    spec = validate_spec(params_yaml=PARAMS, num_csx=1, num_steps=5)
    return Job(
        id=job_id,
        user="alice",
        spec=spec,
        phase=Phase.QUEUED,
        created_at=NOW,
        updated_at=NOW,
        reason=reason,
    )


def test_the_cache_serves_only_the_version_it_holds() -> None:
    cache = JobViewCache()
    cache.put("wsjob-a", 3, _job("wsjob-a", "v3"))
    assert cache.get("wsjob-a", 2, 0) is None
    assert cache.get("wsjob-a", 4, 0) is None
    hit = cache.get("wsjob-a", 3, 7)
    assert hit is not None and (hit.reason, hit.queue_position) == ("v3", 7)
    cache.put("wsjob-a", 2, _job("wsjob-a", "v2"))  # a slower reader of an older version
    assert cache.get("wsjob-a", 2, 0) is None
    cache.put("wsjob-a", 5, _job("wsjob-a", "v5"))
    assert cache.get("wsjob-a", 3, 0) is None
    assert dataclasses.replace(_job("wsjob-a", "v5"), queue_position=1) == cache.get(
        "wsjob-a", 5, 1
    )


def test_the_cache_is_bounded_and_keeps_the_recently_read() -> None:
    cache = JobViewCache(max_entries=2)
    cache.put("wsjob-a", 1, _job("wsjob-a"))
    cache.put("wsjob-b", 1, _job("wsjob-b"))
    assert cache.get("wsjob-a", 1, 0) is not None  # a is now the most recently used
    cache.put("wsjob-c", 1, _job("wsjob-c"))
    assert len(cache) == 2
    assert cache.get("wsjob-b", 1, 0) is None
    assert cache.get("wsjob-a", 1, 0) is not None and cache.get("wsjob-c", 1, 0) is not None
