"""JobService's use cases over a real store, below any door: what a submit checks and records,
who may act on a job, cancelling twice, and watching a job to its end."""

from __future__ import annotations

import re
from typing import Any

import pytest

from appliance.domain.auth import Principal
from appliance.domain.errors import InvalidSpec, PermissionDenied
from appliance.domain.phases import Phase
from appliance.domain.spec import JobSpec, Mode, Priority, validate_spec
from appliance.loops.scheduling import SchedulerLoop
from appliance.services.context import Context
from appliance.services.jobs import MAX_LEASE_SECONDS, JobService
from tests.unit.harness import PARAMS, data_dir, job_service

ALICE = Principal("alice", groups=("nlp",))
CAROL = Principal("carol", groups=("nlp",))
BOB = Principal("bob", groups=("cv",))
ROOT = Principal("root", admin=True)


def spec(num_csx: int = 1, **fields: Any) -> JobSpec:
    return validate_spec(params_yaml=PARAMS, num_csx=num_csx, num_steps=5, **fields)


SPEC = spec()


@pytest.fixture
def jobs(ctx: Context) -> JobService:
    return job_service(ctx)


async def test_a_submit_belongs_to_the_caller_is_queued_and_wakes_the_scheduler(
    ctx: Context, jobs: JobService
) -> None:
    job = await jobs.submit(SPEC, "mallory", by=ALICE)  # the principal decides, not the claim
    assert (job.user, job.groups, job.phase) == ("alice", ("nlp",), Phase.QUEUED)
    model_dirs = (data_dir(ctx) / "model_dirs").resolve()
    assert job.spec.model_dir == str(model_dirs / "users" / "alice" / job.id)  # her own
    assert ctx.bus.schedule_wanted.is_set()
    assert (await jobs.get(job.id)).queue_position == 1
    anonymous = await jobs.submit(SPEC, "dave")  # authentication off: the named user
    assert anonymous.user == "dave"


@pytest.mark.parametrize(
    ("wanted", "lease", "by", "field"),
    [
        (spec(mode=Mode.COMPILE), 0.0, None, "mode"),
        (SPEC, -1.0, None, "lease_seconds"),
        (SPEC, MAX_LEASE_SECONDS + 1, None, "lease_seconds"),
        (spec(num_csx=5), 0.0, None, "num_csx"),
        (spec(priority=Priority.P0), 0.0, ALICE, "priority"),
    ],
)
async def test_a_submit_that_cannot_run_is_refused_naming_the_field_and_stores_nothing(
    ctx: Context,
    jobs: JobService,
    wanted: JobSpec,
    lease: float,
    by: Principal | None,
    field: str,
) -> None:
    with pytest.raises((InvalidSpec, PermissionDenied)) as refused:
        await jobs.submit(wanted, "alice", lease_seconds=lease, by=by)
    assert refused.value.field == field
    assert ctx.store.count_by_phase() == {}


async def test_owners_group_members_and_admins_may_act_others_may_not(jobs: JobService) -> None:
    job = await jobs.submit(SPEC, "", by=ALICE)
    with pytest.raises(PermissionDenied, match="bob may not re-prioritise a job of alice"):
        await jobs.set_priority(job.id, Priority.P1, by=BOB)
    with pytest.raises(PermissionDenied):
        await jobs.update_labels(job.id, {"seen": "yes"}, [], by=BOB)
    with pytest.raises(PermissionDenied):
        await jobs.cancel(job.id, by=BOB)
    with pytest.raises(PermissionDenied, match="P0 is for admins"):
        await jobs.set_priority(job.id, Priority.P0, by=CAROL)
    assert (await jobs.set_priority(job.id, Priority.P1, by=CAROL)).spec.priority is Priority.P1
    assert (await jobs.set_priority(job.id, Priority.P0, by=ROOT)).spec.priority is Priority.P0
    relabelled = await jobs.update_labels(job.id, {"seen": "yes"}, [], by=CAROL)
    assert dict(relabelled.spec.labels) == {"seen": "yes"}


async def test_cancelling_twice_changes_the_job_once_and_says_so(jobs: JobService) -> None:
    job = await jobs.submit(SPEC, "", by=ALICE)
    cancelled, changed, _ = await jobs.cancel(job.id, by=CAROL)
    assert (cancelled.phase, changed) == (Phase.CANCELLED, True)
    again, changed, message = await jobs.cancel(job.id, "  ", by=ALICE)
    assert (again.phase, changed) == (Phase.CANCELLED, False)
    assert message
    [*_, event] = await jobs.events(job.id)
    assert event.reason == "cancelled by carol"


async def test_watch_gives_recorded_then_live_events_and_ends_with_the_job(
    ctx: Context, jobs: JobService
) -> None:
    job = await jobs.submit(SPEC, "alice")
    seen: list[Phase | None] = []
    async for event in jobs.watch(job.id):
        seen.append(event.to_phase)
        if event.to_phase is Phase.QUEUED:  # recorded; what follows arrives live
            await ctx.set_phase(job.id, Phase.CANCELLED, "stop", expected=Phase.QUEUED)
    assert seen == [Phase.QUEUED, Phase.CANCELLED]


@pytest.mark.parametrize("job_id", ["", "wsjob-", "not-a-job", "wsjob-../../etc"])
async def test_malformed_job_ids_are_refused_before_the_store(
    jobs: JobService, job_id: str
) -> None:
    for call in (jobs.get, jobs.events, jobs.cancel):
        with pytest.raises(InvalidSpec) as refused:
            await call(job_id)
        assert refused.value.field == "job_id"


@pytest.mark.parametrize(
    ("reason", "says"),
    [
        ("done\x1b]0;owned\x07", "one line of visible text (it has \\x1b"),
        ("two\nlines", "(it has \\x0a"),
        ("ok \u202eDEDEECCUS", "(it has \\u202e"),  # reads as "ok SUCCEEDED"
        ("x" * 1025, "at most 1024 characters"),
    ],
)
async def test_a_cancel_reason_is_one_bounded_line_of_text(
    jobs: JobService, reason: str, says: str
) -> None:
    job = await jobs.submit(SPEC, "alice")
    with pytest.raises(InvalidSpec, match=re.escape(says)) as refused:
        await jobs.cancel(job.id, reason)
    assert refused.value.field == "reason"
    assert (await jobs.get(job.id)).phase is Phase.QUEUED  # nothing half-done
    with pytest.raises(InvalidSpec) as holder:
        await jobs.renew_lease(job.id, "host\x1b[2J")
    assert holder.value.field == "holder"
    cancelled, _, _ = await jobs.cancel(job.id, "  " + "y" * 1024 + "  ")
    assert cancelled.phase is Phase.CANCELLED


async def test_only_those_who_may_act_on_a_job_see_its_details(
    ctx: Context, jobs: JobService
) -> None:
    job = await jobs.submit(SPEC, "", by=ALICE)
    await SchedulerLoop(ctx).run_once()
    [replica, *_] = ctx.store.replicas(job.id)
    ctx.store.update_replica(job.id, replica.name, address="10.1.2.3:4567", pid=4242)
    ctx.store.update_replica(job.id, replica.name, exit_code=1, log_tail="loss 0.1 secret")

    for who in (ALICE, CAROL, ROOT, None):  # owner, group, admin, authentication off
        seen = await jobs.get(job.id, by=who)
        assert seen.spec.params_yaml == PARAMS
        assert {r.name: (r.address, r.pid, r.log_tail) for r in seen.replicas}[replica.name] == (
            "10.1.2.3:4567",
            4242,
            "loss 0.1 secret",
        )
    other = await jobs.get(job.id, by=BOB)
    assert other.spec.params_yaml == "" and other.phase is Phase.SCHEDULED
    assert all((r.address, r.pid, r.log_tail) == ("", 0, "") for r in other.replicas)
    assert [r.name for r in other.replicas] == [r.name for r in seen.replicas]
    assert (await jobs.get(job.id, by=ALICE)).spec.params_yaml == PARAMS  # the cache is whole
