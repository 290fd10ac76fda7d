"""Reservations on the sim backend (the virtual clock: no sleeps): a maintenance window keeps
a job whose time limit would run into it off its systems (it runs elsewhere or waits for the
window's end) while one that ends before it runs at once; a user's reservation is used first
by that user's job and not by another's."""

from __future__ import annotations

from appliance.config import Settings
from appliance.domain.job import Job
from appliance.domain.phases import Phase
from appliance.simulation.runner import EPOCH, simulate
from appliance.simulation.workload import SimJob

THREE = Settings(systems=3, memoryx_nodes=3, swarmx_nodes=2)
MIN = 60.0


def _run(workload: list[SimJob], reservation: dict[str, object]) -> list[Job]:
    outcome = simulate(workload, THREE, sample_every=60, reservations=[reservation])
    jobs = [job for _, job in outcome.jobs]
    assert all(job.phase is Phase.SUCCEEDED for job in jobs), [j.reason for j in jobs]
    return jobs


def test_a_job_that_would_run_into_maintenance_waits_or_goes_elsewhere() -> None:
    maint = {
        "name": "fans", "systems": ["cs2-01", "cs2-02"], "maint": True,
        "start": EPOCH + 30 * MIN, "end": EPOCH + 90 * MIN,
    }  # fmt: skip
    short, elsewhere, waits = _run(
        [
            SimJob(0.0, 1, 10 * MIN, time_limit=15 * MIN),  # ends before the window
            SimJob(1.0, 1, 20 * MIN, time_limit=40 * MIN),  # would run into it: cs2-03
            SimJob(2.0, 2, 20 * MIN, time_limit=40 * MIN),  # needs two: after the window
        ],
        maint,
    )
    assert short.started_at - EPOCH < 2 * MIN and short.systems[0] in ("cs2-01", "cs2-02")
    assert elsewhere.started_at - EPOCH < 2 * MIN and elsewhere.systems == ("cs2-03",)
    assert waits.started_at >= EPOCH + 90 * MIN


def test_a_users_reservation_is_used_first_by_them_and_not_by_others() -> None:
    theirs = {
        "name": "alice", "systems": ["cs2-03"], "users": ["alice"],
        "start": EPOCH, "end": EPOCH + 60 * MIN,
    }  # fmt: skip
    others, alices = _run(
        [
            SimJob(0.0, 3, 10 * MIN, user="bob", time_limit=15 * MIN),  # needs cs2-03 too
            SimJob(1.0, 1, 10 * MIN, user="alice", time_limit=15 * MIN),
        ],
        theirs,
    )
    assert alices.started_at - EPOCH < 2 * MIN and alices.systems == ("cs2-03",)
    assert others.started_at >= EPOCH + 60 * MIN  # not on alice's system in her window
