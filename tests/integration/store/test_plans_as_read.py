"""Plans and summaries read in bulk (the queue, a listing) come from the columns as the driver
gives them, on every backend: each distinct plan is one shared object, equal to the plan
written; a summary is the one a full view shows, less its details."""

from __future__ import annotations

import dataclasses

from appliance.domain.inventory import default_pool
from appliance.domain.job import Progress
from appliance.domain.phases import Phase
from appliance.domain.plan import plan_replicas
from appliance.store.jobs import JobStore
from tests.integration.store.driving import T0, drive, make_spec, submit


def test_queued_jobs_share_one_plan_object_per_distinct_plan(store: JobStore) -> None:
    for i, num_csx in enumerate([1, 2, 1, 2, 1]):
        submit(store, f"wsjob-plan{i:04d}", now=T0 + i, num_csx=num_csx)
    queued = store.queued_jobs()
    plans = {job.job_id: job.plan for job in queued}
    for num_csx in (1, 2):
        assert plans[f"wsjob-plan000{num_csx - 1}"] == plan_replicas(
            make_spec(num_csx=num_csx), default_pool()
        )
    assert len({id(plan) for plan in plans.values()}) == 2
    entries, gone = store.queue_entries(["wsjob-plan0000", "wsjob-plan0002", "wsjob-none"])
    assert gone == ["wsjob-none"]
    assert {id(e.plan) for e in entries} == {id(plans["wsjob-plan0000"])}


def test_a_summary_is_the_full_view_without_its_details(store: JobStore) -> None:
    submit(store, "wsjob-sum0000001", labels={"team": "nlp", "run": "7"})
    drive(store, "wsjob-sum0000001", Phase.RUNNING)
    store.set_progress("wsjob-sum0000001", 1, Progress(step=3, num_steps=100, loss=1.5))
    [summary] = store.job_summaries(["wsjob-sum0000001"])
    full = store.get_job("wsjob-sum0000001")
    assert summary.progress.step == 3 and summary.spec.labels == {"team": "nlp", "run": "7"}
    assert summary == dataclasses.replace(
        full,
        spec=dataclasses.replace(full.spec, params_yaml=""),
        replicas=(),
        attempts=(),
        dependents=(),
        queue_position=0,
    )
