"""A submit to a queue with a borrowing limit is checked against the queue's quota, resolved
once per kept copy of the definitions and the pool (#38: with 30 queues, resolving them on
every submit cost ~1 ms), and afresh after any change to either."""

from __future__ import annotations

import pytest

from appliance.domain.errors import ApplianceError
from appliance.domain.spec import validate_spec
from appliance.services import queues
from appliance.services.context import Context
from appliance.services.jobs import JobService
from appliance.services.queues import QueueService
from tests.unit.harness import PARAMS, job_service


@pytest.fixture
def jobs(ctx: Context) -> JobService:
    return job_service(ctx)


async def test_quotas_are_resolved_once_while_nothing_changes(
    ctx: Context, jobs: JobService, monkeypatch: pytest.MonkeyPatch
) -> None:
    await QueueService(ctx).set("nlp", {"systems": 2, "borrow_systems": 1}, None)
    ctx.store.queue_specs(), ctx.store.pool()  # the store keeps what it read
    resolved = []
    real = queues.resolve_quotas
    monkeypatch.setattr(
        queues, "resolve_quotas", lambda *a, **k: resolved.append(1) or real(*a, **k)
    )
    for _ in range(10):
        await jobs.submit(
            validate_spec(params_yaml=PARAMS, num_csx=3, num_steps=5, queue="nlp"), "al"
        )
    assert len(resolved) == 1


async def test_a_change_to_the_queue_is_seen_by_the_next_submit(
    ctx: Context, jobs: JobService
) -> None:
    service = QueueService(ctx)
    await service.set("nlp", {"systems": 2, "borrow_systems": 0}, None)
    spec = validate_spec(params_yaml=PARAMS, num_csx=3, num_steps=5, queue="nlp")
    for _ in range(2):  # the second on the kept copies
        with pytest.raises(ApplianceError) as refused:
            await jobs.submit(spec, "alice")
        assert refused.value.field == "num_csx" and "can never run" in str(refused.value)
    await service.set("nlp", {"borrow_systems": 1}, None)
    job = await jobs.submit(spec, "alice")
    assert job.spec.queue == "nlp"
