"""Elastic jobs in `appliance simulate`: our CSV's num_csx takes a range, and on the virtual
clock an elastic job runs longer in proportion on fewer systems than its most, and grows back
when the systems it waited beside are idle."""

from __future__ import annotations

import pytest

from appliance.config import Settings
from appliance.domain.errors import InvalidSpec
from appliance.domain.phases import Phase
from appliance.simulation.runner import simulate
from appliance.simulation.workload import SimJob, parse_trace


def test_our_csv_takes_a_range_of_systems() -> None:
    jobs, _ = parse_trace("submit_time,num_csx,duration\n0,2-8,60\n0,4,60\n0,3-3,60\n")
    assert [(j.num_csx, j.num_csx_min) for j in jobs] == [(8, 2), (4, 0), (3, 0)]
    with pytest.raises(InvalidSpec, match="line 2"):
        parse_trace("submit_time,num_csx,duration\n0,8-2,60\n")


def test_an_elastic_job_runs_on_what_is_free_longer_then_grows_back() -> None:
    # A fixed job holds 1 of 2 systems for 10 min; the elastic one (1-2, 60 min on 2) starts
    # at once on the other, runs at half speed, grows to 2 once the first ends, and ends
    # before the 120 min it would take on one.
    workload = [SimJob(0.0, 1, 600.0), SimJob(1.0, 2, 3600.0, num_csx_min=1)]
    outcome = simulate(workload, Settings(systems=2, memoryx_nodes=2, swarmx_nodes=1), 60)
    fixed, elastic = (job for _, job in outcome.jobs)
    assert fixed.phase is Phase.SUCCEEDED and elastic.phase is Phase.SUCCEEDED
    first, grown = elastic.attempts
    assert first.scheduled_at - elastic.created_at < 60  # did not wait for both systems
    assert (len(first.systems), len(grown.systems)) == (1, 2)
    assert first.reason.startswith("requeued at a checkpoint to grow from 1 to 2")
    assert 3600 < elastic.finished_at - elastic.created_at < 7200
