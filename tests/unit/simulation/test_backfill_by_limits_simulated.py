"""Backfill by time limits on the sim backend, with known durations (the virtual clock: no
sleeps): eight systems, three running jobs of two ending at 20, 40 and 60 minutes, a head of
four behind them; a short job starts in the gap a long one would not fit, and the head starts
no later than without backfill by limits."""

from __future__ import annotations

import dataclasses

from appliance.config import Settings
from appliance.domain.job import Job
from appliance.domain.phases import Phase
from appliance.domain.spec import Priority
from appliance.simulation.runner import simulate
from appliance.simulation.workload import SimJob

EIGHT = Settings(systems=8, memoryx_nodes=4, swarmx_nodes=4)
MIN = 60.0


def _workload(limits: bool) -> list[SimJob]:
    jobs = [
        SimJob(0.0, 2, 20 * MIN, Priority.P1, time_limit=25 * MIN),
        SimJob(1.0, 2, 40 * MIN, Priority.P1, time_limit=45 * MIN),
        SimJob(2.0, 2, 60 * MIN, Priority.P1, time_limit=65 * MIN),
        SimJob(60.0, 4, 10 * MIN, time_limit=15 * MIN),  # the head
        SimJob(120.0, 2, 60 * MIN, time_limit=65 * MIN),  # long: would delay the head
        SimJob(180.0, 2, 10 * MIN, time_limit=12 * MIN),  # short: ends before the head's start
    ]
    return jobs if limits else [dataclasses.replace(j, time_limit=None) for j in jobs]


def _run(limits: bool) -> list[Job]:
    outcome = simulate(_workload(limits), EIGHT, sample_every=60)
    jobs = [job for _, job in outcome.jobs]
    assert all(job.phase is Phase.SUCCEEDED for job in jobs), [j.reason for j in jobs]
    return jobs


def test_a_short_job_fills_the_gap_and_the_head_is_not_delayed() -> None:
    *_, head, long, short = _run(limits=True)
    *_, head_before, _, short_before = _run(limits=False)
    assert short.started_at - short.created_at < 2 * MIN  # in the gap, at once
    assert short_before.started_at - short_before.created_at > 20 * MIN  # behind the head
    assert head.started_at <= head_before.started_at + 1  # never later than without
    assert long.started_at >= head.started_at  # the long one waited for the head
