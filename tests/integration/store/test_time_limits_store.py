"""The JobStore contract for time limits, on every backend: a queue's default and maximum kept;
a job's limit stored as seconds; only time RUNNING added up over attempts (ran_seconds); the
running jobs at their limit found, and when each holder gives its systems back; the end of a
stopping attempt in TIMEOUT, its systems back in the same transaction."""

from __future__ import annotations

import dataclasses

from appliance.domain.inventory import default_pool
from appliance.domain.job import ReplicaPhase
from appliance.domain.phases import Phase
from appliance.domain.plan import plan_replicas
from appliance.domain.queues import validate_queue
from appliance.domain.reasons import ReasonCode, said
from appliance.domain.spec import validate_spec
from appliance.store.jobs import JobStore, NewJob
from tests.integration.store.driving import PARAMS, T0, placements_for


def _submit(store: JobStore, job_id: str, limit: str, *, model_dir: str = "/m") -> None:
    spec = validate_spec(params_yaml=PARAMS, num_csx=2, num_steps=100, time_limit=limit)
    spec = dataclasses.replace(spec, model_dir=model_dir)
    store.create_jobs([NewJob(job_id, "alice", spec, plan_replicas(spec, default_pool()))], T0)


def _run(store: JobStore, job_id: str, at: float) -> None:
    store.schedule(job_id, placements_for(store, job_id), at)
    store.set_phase(job_id, Phase.INITIALIZING, "up", at)
    store.set_phase(job_id, Phase.RUNNING, "ready", at)


def test_a_queues_time_limits_are_kept(store: JobStore) -> None:
    spec = validate_queue(name="nlp", default_time_limit="2:00:00", max_time_limit="1-00")
    store.put_queue("nlp", lambda _current: spec, lambda _queues: None)
    (kept,) = [q for q in store.queue_specs() if q.name == "nlp"]
    assert (kept.default_time_limit, kept.max_time_limit) == (7200, 86400)


def test_running_time_adds_up_over_attempts_and_the_limit_is_found(store: JobStore) -> None:
    _submit(store, "wsjob-limited000000", "0:10:00")  # 600 s
    _submit(store, "wsjob-unlimited0000", "")
    (entry, other) = sorted(store.queued_jobs(), key=lambda j: j.job_id)
    assert (entry.run_limit, other.run_limit) == (600.0, None)
    _run(store, "wsjob-limited000000", T0 + 100)
    _run(store, "wsjob-unlimited0000", T0 + 100)
    releases = sorted(store.releases(T0 + 200), key=lambda r: r.ends_at or 0)
    assert [(r.systems, r.ends_at) for r in releases] == [(2, None), (2, T0 + 700)]
    assert sorted(n for n, _ in releases[1].holdings if n.startswith("cs2")) == sorted(
        store.get_job("wsjob-limited000000").systems
    )
    # 400 s RUNNING, then requeued: 1000 s in the queue do not count.
    assert store.request_requeue("wsjob-limited000000", 1, "preempted", T0 + 500)[0]
    store.requeue_now("wsjob-limited000000", 1, "preempted", T0 + 500)
    (entry,) = [j for j in store.queued_jobs() if j.job_id == "wsjob-limited000000"]
    assert entry.run_limit == 200.0
    store.set_phase("wsjob-unlimited0000", Phase.CANCELLED, "make room", T0 + 1500)
    _run(store, "wsjob-limited000000", T0 + 1500)
    assert store.over_time_limit(T0 + 1699) == []
    (over,) = store.over_time_limit(T0 + 1700)
    assert (over.job_id, over.attempt, over.limit, over.checkpointable) == (
        "wsjob-limited000000", 2, 600, True
    )  # fmt: skip


def test_a_stopping_attempt_ends_in_timeout_with_its_systems_back(store: JobStore) -> None:
    _submit(store, "wsjob-limited000000", "1")
    _run(store, "wsjob-limited000000", T0 + 10)
    reason = said(ReasonCode.TIME_LIMIT, limit="00:01:00")
    assert store.time_out_now("wsjob-limited000000", 1, reason, T0 + 70) == []  # not stopping
    assert store.request_requeue("wsjob-limited000000", 1, reason, T0 + 70)[0]
    assert len(store.time_out_now("wsjob-limited000000", 1, reason, T0 + 70)) == 1
    job = store.get_job("wsjob-limited000000")
    assert (job.phase, job.reason_code) == (Phase.TIMEOUT, "TimeLimit")
    # Torn down while stopping (when exits are not recorded): none is left READY with a pid.
    assert job.replicas and {(r.phase, r.pid) for r in job.replicas} == {(ReplicaPhase.STOPPED, 0)}
    assert not store.node_holders() and store.releases(T0 + 80) == []
    assert store.over_time_limit(T0 + 1000) == []
