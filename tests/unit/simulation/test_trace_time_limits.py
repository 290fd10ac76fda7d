"""A trace's time limits: sacct's Timelimit (and our CSV's time_limit) become the jobs' limits
in `appliance simulate`; Elapsed stays the run time; a job that runs past its limit ends
TIMEOUT on the virtual clock, as on the site."""

from __future__ import annotations

import pytest

from appliance.config import Settings
from appliance.domain.errors import InvalidSpec
from appliance.domain.phases import Phase
from appliance.simulation.runner import simulate
from appliance.simulation.workload import SimJob, parse_trace
from bench.backfill_gain import trace

HEADER = "JobID|Submit|Start|Elapsed|NNodes|Timelimit\n"


def _row(n: int, limit: str) -> str:
    return f"{n}|2024-05-01T10:00:0{n}|2024-05-01T10:00:0{n}|00:30:00|1|{limit}\n"


def test_sacct_timelimits_in_every_form() -> None:
    rows = [("1-00:00:00", 86400.0), ("UNLIMITED", None), ("Partition_Limit", None),
            ("", None), ("45:00", 2700.0), ("90", 5400.0), ("02:00:00", 7200.0)]  # fmt: skip
    jobs, left = parse_trace(HEADER + "".join(_row(n, text) for n, (text, _) in enumerate(rows)))
    assert left.rows == 0
    assert [job.time_limit for job in jobs] == [seconds for _, seconds in rows]
    assert all(job.duration == 1800.0 for job in jobs)  # Elapsed stays the run time
    no_column, _ = parse_trace("JobID|Submit|Start|Elapsed|NNodes\n1|0|0|00:30:00|1\n")
    assert no_column[0].time_limit is None
    ours, _ = parse_trace("submit_time,num_csx,duration,time_limit\n0,1,60,02:00\n")
    assert ours[0].time_limit == 120.0


def test_an_unreadable_timelimit_leaves_the_row_out_of_a_sacct_export() -> None:
    jobs, left = parse_trace(HEADER + _row(1, "soon") + _row(2, "0") + _row(3, "1:00:00"))
    assert [job.time_limit for job in jobs] == [3600.0]
    assert left.unreadable == 2 and "Timelimit 'soon'" in left.examples[0]
    with pytest.raises(InvalidSpec, match="time_limit 'x'"):
        parse_trace("submit_time,num_csx,duration,time_limit\n0,1,60,x\n")


def test_a_job_past_its_limit_times_out_on_the_virtual_clock() -> None:
    workload = [SimJob(0.0, 1, 3600.0, time_limit=1800.0), SimJob(0.0, 1, 600.0, time_limit=900)]
    outcome = simulate(workload, Settings(systems=2, memoryx_nodes=2, swarmx_nodes=1), 60)
    over, within = (job for _, job in outcome.jobs)
    assert (over.phase, over.reason_code, within.phase) == (
        Phase.TIMEOUT, "TimeLimit", Phase.SUCCEEDED
    )  # fmt: skip
    assert 1800 <= over.finished_at - over.started_at <= 2700  # its limit, a sweep, the grace


def test_the_benchmarks_trace_reads_as_a_site_export() -> None:
    jobs, left = parse_trace(trace(40, 37))
    assert len(jobs) == 40 and left.rows == 0
    assert all(1 <= job.num_csx <= 4 for job in jobs)
    limited = [job for job in jobs if job.time_limit is not None]
    assert limited and all(job.time_limit >= job.duration for job in limited)
