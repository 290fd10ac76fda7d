"""What a simulation found: wait times by priority and by queue, utilisation, preemptions,
restarts and makespan, as text, as a JSON summary, and as a PNG plot of the queue depth and
the systems in use over time.

A job's wait is from its submit to its first start (its first attempt getting resources; a job
that never started is counted apart);
utilisation is the system-time the attempts held over the systems times the makespan (from
the first submit to the last end).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from appliance.domain.job import Job
from appliance.domain.phases import Phase
from appliance.simulation.runner import EPOCH, Outcome
from appliance.simulation.workload import SimJob

PERCENTILES = (50, 90, 99)


def summarize(outcome: Outcome) -> dict[str, Any]:
    jobs = outcome.jobs
    first = min((job.created_at for _, job in jobs), default=EPOCH)
    last = max((job.finished_at for _, job in jobs), default=first)
    makespan = max(0.0, last - first)
    held = sum(_held(job) for _, job in jobs)
    phases: dict[str, int] = {}
    for _, job in jobs:
        phases[job.phase.value] = phases.get(job.phase.value, 0) + 1
    return {
        "jobs": len(jobs),
        "systems": outcome.systems,
        "memoryx_nodes": outcome.memoryx,
        "swarmx_nodes": outcome.swarmx,
        "phases": phases,
        "makespan_hours": round(makespan / 3600, 3),
        "utilisation": round(held / (outcome.systems * makespan), 4) if makespan else 0.0,
        "preemptions": sum(_preemptions(job) for _, job in jobs),
        "restarts": sum(job.retries for _, job in jobs),
        # Still queued when the simulation ended: nothing ran for a day and they could not.
        "never_started": sum(1 for _, job in jobs if _wait(job) is None),
        "wait_seconds": {
            "all": _percentiles(w for _, job in jobs if (w := _wait(job)) is not None),
            "by_priority": _grouped(jobs, lambda sim: sim.priority.name),
            "by_queue": _grouped(jobs, lambda sim: sim.queue),
        },
    }


def text(summary: dict[str, Any]) -> str:
    """The summary as a newcomer reads it."""
    lines = [
        f"{summary['jobs']} jobs on {summary['systems']} systems ({summary['memoryx_nodes']} "
        f"MemoryX, {summary['swarmx_nodes']} SwarmX): makespan "
        f"{summary['makespan_hours']:.2f} h, utilisation {100 * summary['utilisation']:.1f}%, "
        f"{summary['preemptions']} preemptions, {summary['restarts']} restarts",
        "phases: "
        + ", ".join(f"{k} {v}" for k, v in sorted(summary["phases"].items()))
        + (
            f" ({summary['never_started']} never started: they could not run, and nothing "
            "else did, for a simulated day)"
            if summary["never_started"]
            else ""
        ),
        "",
        f"{'WAIT (minutes)':<22}{'JOBS':>6}" + "".join(f"{'p' + str(p):>10}" for p in PERCENTILES),
    ]
    waits = summary["wait_seconds"]
    rows = [("all jobs", waits["all"])]
    rows += [(f"priority {k}", v) for k, v in sorted(waits["by_priority"].items())]
    rows += [(f"queue {k}", v) for k, v in sorted(waits["by_queue"].items())]
    for label, stats in rows:
        cells = "".join(f"{stats[f'p{p}'] / 60:>10.1f}" for p in PERCENTILES)
        lines.append(f"{label:<22}{stats['jobs']:>6}{cells}")
    return "\n".join(lines)


def write_json(summary: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(summary, indent=2) + "\n")


def plot(outcome: Outcome, path: Path) -> None:
    """Queue depth and systems in use over time, one PNG."""
    import matplotlib

    matplotlib.use("Agg")  # no display: a file
    from matplotlib import pyplot

    hours = [s.at / 3600 for s in outcome.samples]
    figure, (queue, systems) = pyplot.subplots(2, 1, sharex=True, figsize=(9, 5.5))
    queue.plot(hours, [s.queued for s in outcome.samples], color="tab:orange")
    queue.set_ylabel("jobs queued")
    systems.plot(hours, [s.systems_in_use for s in outcome.samples], color="tab:blue")
    systems.axhline(outcome.systems, color="grey", linestyle="--", linewidth=0.8)
    systems.set_ylabel("systems in use")
    systems.set_ylim(0, outcome.systems * 1.05)
    systems.set_xlabel("hours since the first submit")
    figure.suptitle(f"{len(outcome.jobs)} jobs on {outcome.systems} CS-2 systems (simulated)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)


def _wait(job: Job) -> float | None:
    """From submit to the first start; None for a job that never started."""
    if job.attempts:
        return max(0.0, job.attempts[0].scheduled_at - job.created_at)
    return max(0.0, job.started_at - job.created_at) if job.started_at else None


def _held(job: Job) -> float:
    """System-seconds the job's attempts held (a job that ran once lists no attempts)."""
    if not job.attempts:
        ran = job.finished_at - job.started_at if job.started_at else 0.0
        return len(job.systems) * max(0.0, ran)
    return sum(len(a.systems) * max(0.0, a.ended_at - a.scheduled_at) for a in job.attempts)


def _preemptions(job: Job) -> int:
    return sum(
        1 for a in job.attempts if a.ended_in is Phase.QUEUED and a.reason.startswith("preempted")
    )


def _grouped(jobs: Sequence[tuple[SimJob, Job]], key: Any) -> dict[str, dict[str, float]]:
    groups: dict[str, list[float]] = {}
    for sim, job in jobs:
        wait = _wait(job)
        if wait is not None:
            groups.setdefault(key(sim), []).append(wait)
    return {name: _percentiles(waits) for name, waits in groups.items()}


def _percentiles(values: Iterable[float]) -> dict[str, float]:
    ordered = sorted(values)
    out: dict[str, float] = {"jobs": len(ordered)}
    for p in PERCENTILES:
        index = min(len(ordered) - 1, int(p / 100 * len(ordered))) if ordered else 0
        out[f"p{p}"] = round(ordered[index], 1) if ordered else 0.0
    return out
