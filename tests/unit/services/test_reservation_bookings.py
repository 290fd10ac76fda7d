"""Reservations through the use case and the scheduler loop, over a real SQLite store (#37):
only admins book and delete, nothing stored on a refusal; a list drops the ended ones; a
queued job whose limit would run into a maintenance window waits saying so, and runs once the
reservation is deleted. The rules alone: tests/unit/domain/test_reservations.py."""

from __future__ import annotations

import pytest

from appliance.domain.auth import Principal
from appliance.domain.errors import Conflict, InvalidSpec, NotFound, PermissionDenied
from appliance.domain.phases import Phase
from appliance.domain.reasons import ReasonCode
from appliance.loops.scheduling import SchedulerLoop
from appliance.services.context import Context
from appliance.services.reservations import ReservationService
from tests.unit.harness import NOW, Clock, create, new_jobs, shown

ROOT = Principal("root", admin=True)
ALICE = Principal("alice")
MAINT = {"name": "fans", "systems": 4, "maint": True, "duration": 3600}


async def test_only_admins_book_and_nothing_is_stored_on_a_refusal(ctx: Context) -> None:
    reservations = ReservationService(ctx)
    with pytest.raises(PermissionDenied):
        await reservations.create(MAINT, by=ALICE)
    with pytest.raises(InvalidSpec) as refused:
        await reservations.create({**MAINT, "systems": ["cs2-09"]}, by=ROOT)
    assert refused.value.field == "systems"
    assert await reservations.list() == []
    made = await reservations.create(MAINT, by=ROOT)
    assert made.creator == "root" and len(made.nodes) == 4
    assert await reservations.holding() == {n: "fans" for n in made.nodes}
    with pytest.raises(PermissionDenied):
        await reservations.delete("fans", by=ALICE)
    await reservations.delete("fans", by=ROOT)
    with pytest.raises(NotFound):
        await reservations.delete("fans", by=ROOT)


async def test_a_reservation_for_a_queue_that_does_not_exist_is_refused(ctx: Context) -> None:
    reservations = ReservationService(ctx)
    team = {"name": "team", "systems": 1, "queue": "nosuchqueue", "duration": 3600}
    with pytest.raises(InvalidSpec) as refused:
        await reservations.create(team, by=ROOT)
    assert refused.value.field == "queue" and "the queues are default" in refused.value.message
    assert await reservations.list() == []
    made = await reservations.create({**team, "queue": "default"}, by=ROOT)
    assert made.audience == "queue=default"


async def test_an_ended_reservation_is_dropped_from_the_list(ctx: Context, clock: Clock) -> None:
    reservations = ReservationService(ctx)
    await reservations.create(MAINT, by=ROOT)
    clock.now += 3600
    assert await reservations.list() == []


async def test_a_job_running_into_maintenance_waits_and_runs_once_it_is_deleted(
    ctx: Context, clock: Clock
) -> None:
    reservations = ReservationService(ctx)
    await reservations.create({**MAINT, "start": clock.now + 60}, by=ROOT)
    job_id = "wsjob-reservedwait00"
    create(ctx, new_jobs([job_id], num_csx=1), NOW)  # no time limit: runs into any window
    loop = SchedulerLoop(ctx)
    assert await loop.run_once() == 0
    job = shown(ctx, job_id)
    assert job.phase is Phase.QUEUED and job.pending_reason_code == ReasonCode.RESERVATION.value
    assert "Reserved for maintenance (fans)" in job.pending_reason
    await reservations.delete("fans", by=ROOT)
    assert await loop.run_once() == 1


async def test_a_count_leaves_a_system_whose_job_would_run_into_the_window(
    ctx: Context,
) -> None:
    job_id = "wsjob-runsforever00"
    create(ctx, new_jobs([job_id], num_csx=1), NOW)  # no time limit: runs into any window
    assert await SchedulerLoop(ctx).run_once() == 1
    [held] = shown(ctx, job_id).systems
    made = await ReservationService(ctx).create({**MAINT, "systems": 1}, by=ROOT)
    assert made.nodes != (held,)  # an idle system, not the one the job will not give back
    with pytest.raises(Conflict) as refused:  # nor by name: the job would run into it
        await ReservationService(ctx).create({**MAINT, "name": "fan", "systems": [held]}, by=ROOT)
    assert refused.value.field == "systems"
