"""`appliance simulate`: what would this workload do on this cluster (runner.py, report.py)."""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import click

from appliance.composition import StartupError
from appliance.config import Settings
from appliance.domain.errors import ApplianceError, InsufficientCapacity
from appliance.domain.plan import plan_replicas
from appliance.domain.queues import DEFAULT_QUEUE
from appliance.domain.spec import Priority, validate_spec
from appliance.services.queues import read_queues_file
from appliance.simulation.workload import (
    Generator,
    LeftOut,
    SimJob,
    queue_name,
    read_trace,
    to_queues,
    weights,
)

PARAMS_CHECK = "model: {name: fc_mnist, hidden_sizes: [64]}\n"  # the simulated jobs' model


@click.command()
@click.option(
    "--trace",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A workload to replay: CSV (submit_time,num_csx,duration,priority,queue,user) "
    "or a `sacct --parsable2` export. Without it, the generator below.",
)
@click.option(
    "--jobs",
    type=click.IntRange(1, 1_000_000),
    default=1000,
    show_default=True,
    help="Generator: how many jobs.",
)
@click.option(
    "--arrivals-per-hour",
    type=click.FloatRange(min=0.001),
    default=60.0,
    show_default=True,
    help="Generator: mean arrival rate (Poisson).",
)
@click.option(
    "--sizes",
    default="1:8,2:4,4:2,8:1,16:1",
    show_default=True,
    help="Generator: systems per job, SIZE:WEIGHT.",
)
@click.option(
    "--median-duration",
    type=click.FloatRange(0, 365 * 86400),
    default=3600.0,
    show_default=True,
    help="Generator: median job duration, seconds (lognormal).",
)
@click.option(
    "--duration-sigma",
    type=click.FloatRange(0, 5),
    default=1.0,
    show_default=True,
    help="Generator: spread of durations (0: every job lasts the median).",
)
@click.option(
    "--priorities", default="P1:1,P2:6,P3:3", show_default=True, help="Generator: PRIORITY:WEIGHT."
)
@click.option(
    "--queue-mix",
    default="default:1",
    show_default=True,
    help="Generator: QUEUE:WEIGHT (the queues of --queues-file).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Generator: random seed.")
@click.option(
    "--systems",
    type=click.IntRange(1, 4096),
    default=None,
    help="CS-2 systems [default: APPLIANCE_SYSTEMS, 4].",
)
@click.option(
    "--memoryx",
    type=click.IntRange(1, 4096),
    default=None,
    help="MemoryX nodes [default: APPLIANCE_MEMORYX_NODES].",
)
@click.option(
    "--swarmx",
    type=click.IntRange(1, 4096),
    default=None,
    help="SwarmX nodes [default: APPLIANCE_SWARMX_NODES].",
)
@click.option(
    "--queues-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Queues with quotas (the YAML of APPLIANCE_QUEUES_FILE).",
)
@click.option(
    "--sample-every",
    type=click.FloatRange(1, 86400),
    default=300.0,
    show_default=True,
    help="Seconds of simulated time between two plot points.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("simulation"),
    show_default=True,
    help="Directory for summary.json and plot.png.",
)
def simulate(
    trace: Path | None,
    jobs: int,
    arrivals_per_hour: float,
    sizes: str,
    median_duration: float,
    duration_sigma: float,
    priorities: str,
    queue_mix: str,
    seed: int,
    systems: int | None,
    memoryx: int | None,
    swarmx: int | None,
    queues_file: Path | None,
    sample_every: float,
    out: Path,
) -> None:
    """Run a workload through the real scheduler on a simulated cluster, on a virtual clock,
    and report wait times, utilisation and preemptions.

    \b
    Examples:
      appliance simulate --jobs 2000 --arrivals-per-hour 40 --systems 64
      appliance simulate --trace last-month.sacct --systems 80   # what 16 more would do
    """
    from appliance.simulation import report
    from appliance.simulation.runner import simulate as run

    overrides: dict[str, object] = {"queues_file": queues_file}
    if systems is not None:  # MemoryX and SwarmX grow with it unless given: 2:1 and 4:1
        overrides["systems"] = systems
        overrides["memoryx_nodes"] = memoryx or max(1, systems // 2)
        overrides["swarmx_nodes"] = swarmx or max(1, systems // 4)
    for name, value in (("memoryx_nodes", memoryx), ("swarmx_nodes", swarmx)):
        if value is not None:
            overrides[name] = value
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
        left = LeftOut()
        mapped: dict[str, int] = {}
        if trace is not None:
            workload, left = read_trace(trace)
            workload, mapped = to_queues(workload, _queue_names(queues_file))
        else:
            workload = _generated(
                jobs, arrivals_per_hour, sizes, median_duration, duration_sigma, priorities,
                queue_mix, seed,
            )  # fmt: skip
    except ApplianceError as exc:
        raise click.ClickException(exc.message) from None
    fits, why = _plannable(workload, settings)
    if not fits:
        raise click.ClickException(f"no job of the workload fits the pool: {why}")
    for partition, count in sorted(mapped.items()):
        click.echo(
            f"partition {partition} is no queue here: its {count} jobs go to queue "
            f"{DEFAULT_QUEUE} (define it in --queues-file to keep it apart)",
            err=True,
        )
    unheld = len(workload) - len(fits)
    if left.rows or unheld:
        said = [left.said()] * bool(left.rows)
        said += [f"{unheld} jobs the pool cannot hold ({why})"] * bool(unheld)
        click.echo(f"left out: {', '.join(said)}", err=True)
    logging.getLogger().setLevel(logging.WARNING)  # the loops' INFO lines, by the thousand
    started = time.perf_counter()
    try:
        out.mkdir(parents=True, exist_ok=True)  # before the run, not after it
    except OSError as exc:
        raise click.ClickException(f"--out {out}: {exc.strerror}") from None
    try:
        outcome = run(fits, settings, sample_every)
    except ApplianceError as exc:
        raise click.ClickException(exc.message) from None
    except StartupError as exc:  # e.g. a queues file the pool cannot hold
        raise click.ClickException(str(exc)) from None
    summary = report.summarize(outcome)
    if trace is not None:  # what of the trace is not in the figures, and where it went
        summary["trace"] = {
            "left_out": left.document() | {"pool_cannot_hold": unheld},
            "partitions_to_default_queue": mapped,
        }
    report.write_json(summary, out / "summary.json")
    report.plot(outcome, out / "plot.png")
    click.echo(report.text(summary))
    elapsed = time.perf_counter() - started
    click.echo(
        f"\nsimulated in {elapsed:.1f} s; wrote {out / 'summary.json'} and {out / 'plot.png'}"
    )


def _generated(
    jobs: int,
    arrivals: float,
    sizes: str,
    median: float,
    sigma: float,
    priorities: str,
    queue_mix: str,
    seed: int,
) -> list[SimJob]:
    return Generator(
        jobs=jobs,
        arrivals_per_hour=arrivals,
        sizes=weights(sizes, "sizes", _size),
        median_duration=median,
        duration_sigma=sigma,
        priorities=weights(priorities, "priorities", Priority.parse),
        queues=weights(queue_mix, "queue_mix", queue_name),
        seed=seed,
    ).workload()


def _queue_names(queues_file: Path | None) -> frozenset[str]:
    """The queues jobs may name: those of the queues file, and the default one."""
    if queues_file is None:
        return frozenset({DEFAULT_QUEUE})
    specs, _ = read_queues_file(queues_file)
    return frozenset({DEFAULT_QUEUE, *(spec.name for spec in specs)})


def _plannable(workload: list[SimJob], settings: Settings) -> tuple[list[SimJob], str]:
    """The jobs whose size the pool can hold, and why the first one it cannot, cannot."""
    pool = settings.pool()
    spec = validate_spec(params_yaml=PARAMS_CHECK, num_csx=1, num_steps=1)
    verdicts: dict[int, str] = {}
    for size in {job.num_csx for job in workload}:
        try:
            plan_replicas(dataclasses.replace(spec, num_csx=size), pool)
            verdicts[size] = ""
        except InsufficientCapacity as exc:
            verdicts[size] = exc.message
    why = next((verdicts[s] for s in sorted(verdicts) if verdicts[s]), "")
    return [job for job in workload if not verdicts[job.num_csx]], why


def _size(text: str) -> int:
    size = int(text)
    if not 1 <= size <= 4096:
        raise ValueError(text)
    return size
