"""A submit against its queue's time limits: a job over the queue's maximum is refused naming
both (nothing stored); one without a limit gets the queue's default, else its maximum, else
none; the limit is stored as seconds for the loops and the scheduler."""

from __future__ import annotations

import pytest

from appliance.domain.errors import InvalidSpec
from appliance.domain.phases import Phase
from appliance.domain.queues import DEFAULT_QUEUE
from appliance.domain.spec import validate_spec
from appliance.services.context import Context
from appliance.services.jobs import JobService
from appliance.services.queues import QueueService
from appliance.store.tables import JobRow
from tests.unit.harness import PARAMS, job_service


@pytest.fixture
def jobs(ctx: Context) -> JobService:
    return job_service(ctx)


def _stored_limit(ctx: Context, job_id: str) -> int:
    with ctx.store._sessions() as s:
        row = s.get(JobRow, job_id)
        assert row is not None
        return row.time_limit


async def test_a_job_over_its_queues_maximum_is_refused_naming_both(
    ctx: Context, jobs: JobService
) -> None:
    await QueueService(ctx).set(DEFAULT_QUEUE, {"max_time_limit": "1-00:00:00"}, None)
    spec = validate_spec(params_yaml=PARAMS, num_csx=1, num_steps=5, time_limit="1-00:00:01")
    with pytest.raises(InvalidSpec) as refused:
        await jobs.submit(spec, "alice")
    assert refused.value.field == "time_limit"
    assert "1-00:00:01" in refused.value.message and "1-00:00:00" in refused.value.message
    assert ctx.store.count_by_phase().get(Phase.QUEUED, 0) == 0  # nothing stored


async def test_the_queue_gives_its_default_else_its_maximum_else_none(
    ctx: Context, jobs: JobService
) -> None:
    plain = validate_spec(params_yaml=PARAMS, num_csx=1, num_steps=5)
    none = await jobs.submit(plain, "alice")
    assert (none.spec.time_limit, _stored_limit(ctx, none.id)) == ("", 0)
    queues = QueueService(ctx)
    await queues.set(DEFAULT_QUEUE, {"max_time_limit": "4:00:00"}, None)
    capped = await jobs.submit(plain, "alice")
    assert (capped.spec.time_limit, _stored_limit(ctx, capped.id)) == ("04:00:00", 4 * 3600)
    await queues.set(DEFAULT_QUEUE, {"default_time_limit": "30"}, None)
    defaulted = await jobs.submit(plain, "alice")
    assert ctx.store.get_job(defaulted.id).spec.time_limit == "00:30:00"
    assert _stored_limit(ctx, defaulted.id) == 1800
    own = validate_spec(params_yaml=PARAMS, num_csx=1, num_steps=5, time_limit="150")
    mine = await jobs.submit(own, "alice")
    assert (mine.spec.time_limit, _stored_limit(ctx, mine.id)) == ("02:30:00", 9000)


async def test_a_queue_default_over_its_maximum_is_refused(ctx: Context) -> None:
    with pytest.raises(InvalidSpec) as refused:
        await QueueService(ctx).set(
            "nlp", {"default_time_limit": "2:00:00", "max_time_limit": "1:00:00"}, None
        )
    assert refused.value.field == "default_time_limit"
    status = await QueueService(ctx).list()
    assert [q.spec.name for q in status] == [DEFAULT_QUEUE]
