"""Elastic jobs in the store, on every backend: the spec's range and every size's plan are kept
(the `spec` document and the `plan` column: no column of their own), the queue and what runs
read them back, and scheduling writes the replicas of the size admission chose."""

from __future__ import annotations

import dataclasses

from appliance.domain.inventory import default_pool
from appliance.domain.phases import Phase
from appliance.domain.plan import Role, plan_replicas
from appliance.domain.spec import validate_spec
from appliance.scheduler.admission import admit
from appliance.store.jobs import JobStore, NewJob
from tests.integration.store.driving import PARAMS, T0


def test_an_elastic_job_is_kept_queued_scheduled_on_its_size_and_read_as_running(
    store: JobStore,
) -> None:
    spec = validate_spec(
        params_yaml=PARAMS, num_csx=4, num_steps=10, num_csx_min=2, model_dir="/m/e"
    )
    plan = plan_replicas(spec, default_pool())
    store.create_jobs([NewJob("wsjob-elastic001", "alice", spec, plan)], T0)

    job = store.get_job("wsjob-elastic001")
    assert (job.spec.num_csx, job.spec.num_csx_min) == (4, 2)
    [queued] = store.queued_jobs()
    assert queued.plan == plan and [p.systems for p in queued.plan.sizes()] == [4, 3, 2]

    # One system is taken: admission picks three, and the store writes three CS-2 replicas.
    pool = [
        dataclasses.replace(u, used=1) if u.node.name == "cs2-04" else u
        for u in store.pool_usage()
    ]
    [decision] = admit([queued], pool).admitted
    store.schedule(decision.job_id, decision.placements, T0 + 1)
    job = store.get_job("wsjob-elastic001")
    assert len(job.systems) == 3 and job.systems_running == 3
    assert sum(1 for r in job.replicas if r.role is Role.CS2) == 3
    assert {r.name for r in job.replicas if r.role is Role.CS2} == {"cs2-0", "cs2-1", "cs2-2"}

    for phase in (Phase.INITIALIZING, Phase.RUNNING):
        store.set_phase("wsjob-elastic001", phase, f"to {phase}", T0 + 2)
    [running] = store.running_jobs(60.0)
    assert running.elastic == plan and running.checkpointable


def test_a_fixed_size_job_reads_back_without_a_range(store: JobStore) -> None:
    spec = validate_spec(params_yaml=PARAMS, num_csx=2, num_steps=10)
    plan = plan_replicas(spec, default_pool())
    store.create_jobs([NewJob("wsjob-fixed00001", "alice", spec, plan)], T0)
    assert store.get_job("wsjob-fixed00001").spec.num_csx_min == 0
    [queued] = store.queued_jobs()
    assert queued.plan.larger == ()
