"""The JobStore contract for holds (#37), on every backend (`store_url`: SQLite, PostgreSQL
where one is available): a hold is columns of the job, written under its row's lock, bumping
its version; the queue reads carry it; a refused hold or release changes nothing; a held job
is never scheduled, and an ended one keeps no hold."""

from __future__ import annotations

import pytest

from appliance.domain.auth import Principal
from appliance.domain.errors import Conflict, NotFound, PermissionDenied
from appliance.domain.holds import Hold, HoldKind
from appliance.domain.inventory import default_pool
from appliance.domain.phases import Phase
from appliance.domain.plan import plan_replicas
from appliance.store.jobs import JobStore, NewJob
from tests.integration.store.driving import T0, drive, make_spec, placements_for, submit

USERS = Hold(HoldKind.USER, "alice")
ADMINS = Hold(HoldKind.ADMIN, "root")


def test_a_hold_is_written_with_a_new_version_and_read_by_every_queue_read(
    store: JobStore,
) -> None:
    submit(store, "wsjob-held")
    submit(store, "wsjob-free", now=T0 + 1)
    version = store.job_version("wsjob-held")[0]
    job, changed = store.hold_job("wsjob-held", USERS, T0 + 2)
    assert changed and job.hold == USERS and job.updated_at == T0 + 2
    assert store.job_version("wsjob-held")[0] == version + 1
    assert store.get_job("wsjob-held").hold == USERS
    summaries = store.job_summaries(["wsjob-held", "wsjob-free"])
    assert {j.id: j.hold for j in summaries} == {"wsjob-held": USERS, "wsjob-free": None}
    queued = {j.job_id: j.hold for j in store.queued_jobs()}
    assert queued == {"wsjob-held": USERS, "wsjob-free": None}
    entries, _ = store.queue_entries(["wsjob-held"])
    assert [e.hold for e in entries] == [USERS]
    assert store.queue_positions(["wsjob-held", "wsjob-free"]) == {
        "wsjob-held": 1, "wsjob-free": 2,
    }  # fmt: skip

    assert store.hold_job("wsjob-held", ADMINS, T0 + 3)[0].hold == ADMINS
    job, changed = store.release_job("wsjob-held", Principal("root", admin=True), T0 + 4)
    assert changed and job.hold is None
    assert store.job_version("wsjob-held")[0] == version + 3
    assert store.release_job("wsjob-held", None, T0 + 5)[1] is False  # nothing to release
    assert store.job_version("wsjob-held")[0] == version + 3


def test_refused_holds_and_releases_change_nothing(store: JobStore) -> None:
    submit(store, "wsjob-runs")
    drive(store, "wsjob-runs", Phase.RUNNING)
    version = store.job_version("wsjob-runs")[0]
    with pytest.raises(Conflict, match="wsjob-runs is RUNNING; only a queued job can be held"):
        store.hold_job("wsjob-runs", USERS, T0 + 2)
    with pytest.raises(NotFound, match="wsjob-nosuch not found"):
        store.hold_job("wsjob-nosuch", USERS, T0 + 2)
    with pytest.raises(NotFound):
        store.release_job("wsjob-nosuch", None, T0 + 2)
    assert store.job_version("wsjob-runs")[0] == version

    submit(store, "wsjob-admin-held")
    store.hold_job("wsjob-admin-held", ADMINS, T0 + 2)
    version = store.job_version("wsjob-admin-held")[0]
    with pytest.raises(PermissionDenied, match="only an admin may release it"):
        store.release_job("wsjob-admin-held", Principal("alice"), T0 + 3)
    assert store.get_job("wsjob-admin-held").hold == ADMINS
    assert store.job_version("wsjob-admin-held")[0] == version


def test_a_job_submitted_held_is_held_and_a_held_job_is_never_scheduled(
    store: JobStore,
) -> None:
    spec = make_spec()
    plan = plan_replicas(spec, default_pool())
    new = [NewJob("wsjob-sub-held", "alice", spec, plan, hold=USERS)]
    assert store.create_jobs(new, T0)[0].hold == USERS
    assert store.get_job("wsjob-sub-held").hold == USERS
    placements = placements_for(store, "wsjob-sub-held")  # as a pass decided before the hold
    change = store.schedule("wsjob-sub-held", placements, T0 + 1)
    assert not change.applied
    assert store.get_job("wsjob-sub-held").phase is Phase.QUEUED
    assert all(u.used == 0 for u in store.pool_usage())


def test_a_suspension_marks_a_running_job_and_an_ended_job_keeps_no_hold(
    store: JobStore,
) -> None:
    submit(store, "wsjob-susp")
    drive(store, "wsjob-susp", Phase.RUNNING)
    suspension = Hold(HoldKind.USER, "alice", suspended=True)
    job, changed = store.hold_job("wsjob-susp", suspension, T0 + 2)
    assert changed and job.hold == suspension and job.phase is Phase.RUNNING
    store.set_phase("wsjob-susp", Phase.CANCELLED, "cancelled", T0 + 3)
    assert store.get_job("wsjob-susp").hold is None
