"""`appliance simulate` end to end: the real scheduler, reconciler and a SQLite store on a
virtual clock, with results checked against arithmetic; and the command as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.config import Settings
from appliance.domain.phases import Phase
from appliance.domain.spec import Priority
from appliance.simulation import report
from appliance.simulation.runner import simulate
from appliance.simulation.workload import SimJob

APPLIANCE = str(Path(sys.executable).parent / "appliance")
ONE_SYSTEM = Settings(systems=1, memoryx_nodes=1, swarmx_nodes=1)


def test_two_jobs_on_one_system_wait_and_run_as_arithmetic_says() -> None:
    workload = [SimJob(0.0, 1, 600.0), SimJob(60.0, 1, 300.0)]
    outcome = simulate(workload, ONE_SYSTEM, sample_every=30)
    first, second = (job for _, job in outcome.jobs)
    assert (first.phase, second.phase) == (Phase.SUCCEEDED, Phase.SUCCEEDED)
    assert first.finished_at - first.created_at == pytest.approx(600, abs=1)
    assert second.started_at - second.created_at == pytest.approx(540, abs=1)  # behind the first
    assert second.finished_at - first.created_at == pytest.approx(900, abs=1)
    summary = report.summarize(outcome)
    assert summary["makespan_hours"] == pytest.approx(900 / 3600, abs=0.001)
    assert summary["utilisation"] == pytest.approx(1.0, abs=0.01)  # never idle
    assert summary["wait_seconds"]["all"]["p99"] == pytest.approx(540, abs=1)
    # The samples saw the second job queued while the first ran, and the system in use.
    assert max(s.queued for s in outcome.samples) == 1
    assert max(s.systems_in_use for s in outcome.samples) == 1


def test_a_p1_job_preempts_a_p3_job_which_resumes_and_finishes() -> None:
    workload = [SimJob(0.0, 1, 3600.0, Priority.P3), SimJob(600.0, 1, 600.0, Priority.P1)]
    outcome = simulate(workload, ONE_SYSTEM, sample_every=60)
    low, high = (job for _, job in outcome.jobs)
    assert (low.phase, high.phase) == (Phase.SUCCEEDED, Phase.SUCCEEDED)
    assert report.summarize(outcome)["preemptions"] == 1
    # The P1 job waits at most the checkpoint grace, not the P3 job's remaining 50 minutes.
    assert high.started_at - high.created_at < 15 * 60
    assert low.attempts[0].reason.startswith(f"preempted by {high.id}")
    assert low.attempts[-1].resumed_from > 0  # from its checkpoint, not from the start


def test_a_job_that_can_never_run_ends_the_simulation_and_is_counted_apart(
    tmp_path: Path,
) -> None:
    queues = tmp_path / "queues.yaml"
    queues.write_text(
        "queues:\n  - {name: tiny, systems: 1, memoryx: 8GiB, borrow_systems: 0}\n"
        "  - {name: big, systems: 3, memoryx: 24GiB}\n"
    )
    settings = Settings(systems=4, memoryx_nodes=2, swarmx_nodes=1, queues_file=queues)
    workload = [SimJob(0.0, 1, 60.0, queue="tiny"), SimJob(10.0, 2, 60.0, queue="tiny")]
    outcome = simulate(workload, settings, sample_every=600)
    ran, stuck = (job for _, job in outcome.jobs)
    assert (ran.phase, stuck.phase) == (Phase.SUCCEEDED, Phase.QUEUED)
    summary = report.summarize(outcome)
    assert summary["never_started"] == 1 and summary["wait_seconds"]["all"]["jobs"] == 1
    assert "1 never started" in report.text(summary)


def test_the_command_writes_a_summary_and_a_plot(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "submit_time,num_csx,duration,priority,queue,user\n"
        + "".join(f"{i * 300},{1 + i % 2},1800,P{1 + i % 3},,user{i % 4}\n" for i in range(12))
    )
    out = tmp_path / "out"
    done = subprocess.run(
        [APPLIANCE, "simulate", "--trace", str(trace),
         "--systems", "4", "--out", str(out)],
        capture_output=True, text=True, timeout=150, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "12 jobs on 4 systems (2 MemoryX, 1 SwarmX)" in done.stdout
    assert "priority P1" in done.stdout and "Traceback" not in done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["phases"] == {"SUCCEEDED": 12} and 0 < summary["utilisation"] <= 1
    assert (out / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_bad_trace_is_one_line_naming_the_row(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("submit_time,num_csx,duration\n0,1,60\n5,two,60\n")
    done = subprocess.run(
        [APPLIANCE, "simulate", "--trace", str(trace)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    said = "Error: trace line 3: num_csx 'two' is not a number of systems from 1 to 4096"
    assert done.stderr.strip() == said


def test_a_sites_sacct_export_replays_as_it_is(tmp_path: Path) -> None:
    """The README's example on an ordinary export: partitions this cluster has no queue for go
    to the default one, said once; odd rows are counted in the report; nothing stops it."""
    rows = "".join(
        f"{100 + i}|job|debug|normal|u{i % 3}|COMPLETED|2024-05-01T10:{i:02d}:00|"
        f"2024-05-01T10:{i:02d}:30||00:30:00|{1 + i % 2}\n"
        for i in range(6)
    )
    odd = "199|job|debug|normal|u1|COMPLETED|whenever|2024-05-01T10:00:30||00:30:00|1\n"
    trace = tmp_path / "last-month.sacct"
    trace.write_text(
        "JobID|JobName|Partition|QOS|User|State|Submit|Start|End|Elapsed|NNodes\n" + rows + odd
    )
    out = tmp_path / "out"
    done = subprocess.run(
        [APPLIANCE, "simulate", "--trace", str(trace), "--systems", "2", "--out", str(out)],
        capture_output=True, text=True, timeout=150, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "partition debug is no queue here: its 6 jobs go to queue default" in done.stderr
    assert "left out: 1 rows that could not be read (e.g. line 8: Submit" in done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["phases"] == {"SUCCEEDED": 6}
    assert summary["trace"]["partitions_to_default_queue"] == {"debug": 6}
    assert summary["trace"]["left_out"]["unreadable"] == 1
