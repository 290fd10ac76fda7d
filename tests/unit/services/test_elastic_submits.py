"""An elastic job's submit: kept with its range and every size's plan; refused in one line
naming the field, with nothing stored, when its most is over the cluster or over what its
queue may ever hold, or when it is pipelined."""

from __future__ import annotations

import pytest

from appliance.domain.errors import ApplianceError
from appliance.domain.phases import Phase
from appliance.domain.spec import validate_spec
from appliance.services.context import Context
from appliance.services.jobs import JobService
from appliance.services.queues import QueueService
from tests.unit.harness import PARAMS, job_service

PIPELINED = PARAMS + "runconfig: {execution_strategy: pipeline}\n"


@pytest.fixture
def jobs(ctx: Context) -> JobService:
    return job_service(ctx)


async def test_an_elastic_job_is_kept_with_its_range(ctx: Context, jobs: JobService) -> None:
    spec = validate_spec(params_yaml=PARAMS, num_csx=4, num_steps=5, num_csx_min=2)
    job = await jobs.submit(spec, "alice")
    kept = ctx.store.get_job(job.id)
    assert (kept.spec.num_csx, kept.spec.num_csx_min) == (4, 2)
    [queued] = ctx.store.queued_jobs()
    assert [p.systems for p in queued.plan.sizes()] == [4, 3, 2]


@pytest.mark.parametrize(
    ("params", "most", "fewest", "field"),
    [(PARAMS, 5, 2, "num_csx"), (PIPELINED, 2, 1, "num_csx_min")],
)
async def test_a_range_that_cannot_run_is_refused_and_nothing_stored(
    ctx: Context, jobs: JobService, params: str, most: int, fewest: int, field: str
) -> None:
    spec = validate_spec(params_yaml=params, num_csx=most, num_steps=5, num_csx_min=fewest)
    with pytest.raises(ApplianceError) as refused:
        await jobs.submit(spec, "alice")
    assert refused.value.field == field and "\n" not in str(refused.value)
    assert ctx.store.count_by_phase().get(Phase.QUEUED, 0) == 0


async def test_a_most_over_what_its_queue_may_ever_hold_is_refused(
    ctx: Context, jobs: JobService
) -> None:
    await QueueService(ctx).set("nlp", {"systems": 2, "borrow_systems": 0}, None)
    spec = validate_spec(params_yaml=PARAMS, num_csx=4, num_steps=5, num_csx_min=1, queue="nlp")
    with pytest.raises(ApplianceError) as refused:
        await jobs.submit(spec, "alice")
    assert refused.value.field == "num_csx"
    assert ctx.store.count_by_phase().get(Phase.QUEUED, 0) == 0
