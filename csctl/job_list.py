"""`csctl get jobs`: the list, and with -w every change after it (like `kubectl get -w`)."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Iterable, Iterator

import click

from appliance.domain.array_view import collapse_queued
from appliance.domain.errors import InvalidSpec
from appliance.domain.job import Job
from appliance.domain.phases import Phase
from appliance.domain.reasons import parse_codes
from csctl import render
from csctl.job_tables import (
    SortBy,
    columns_of,
    document_fields,
    jobs_table,
    parse_sort_by,
    row,
    sample_job,
)
from csctl.jobs import SELECTOR, get
from csctl.render import Table, say
from csctl.session import Session

_LIST_FORMATS = ("table", "wide", "name", "json", "yaml")


def _reasons(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> tuple[str, ...]:
    """The reason codes given, checked here: an unknown one is refused in one line naming
    --reason and listing the valid codes."""
    try:
        return tuple(code.value for code in sorted(parse_codes(value)))
    except InvalidSpec as exc:
        raise click.BadParameter(exc.message, ctx=ctx, param=param) from None


def _sort_by(ctx: click.Context, param: click.Parameter, value: str | None) -> SortBy | None:
    if value is None:
        return None
    fields = document_fields(render.job_document(sample_job(), with_params=False))
    try:
        return parse_sort_by(value, fields)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


@get.command("jobs")
@click.option("-a", "--all", "include_all", is_flag=True, help="Include finished jobs.")
@click.option("-m", "--my-jobs", is_flag=True, help="Only jobs of the current OS user.")
@SELECTOR
@click.option(
    "-o", "--output", type=click.Choice(_LIST_FORMATS), default="table", show_default=True
)
@click.option("--max-jobs", type=click.IntRange(min=1), help="Show at most N jobs (newest).")
@click.option(
    "--reason",
    "reasons",
    multiple=True,
    callback=_reasons,
    metavar="CODE",
    help="Only jobs waiting, or ended, for this reason code (the REASON column of -o wide: "
    "Capacity, BehindHigherPriority, Quota, Dependency, Preempted, ReplicaFailed, "
    "CancelledByUser, ...; any case; repeat or comma-separate). Finished jobs too.",
)
@click.option(
    "--show-pending",
    is_flag=True,
    help="Add PENDING (queue position and what a queued job waits for) and START(EST) (when "
    "it is estimated to start, from the running jobs' remaining steps and rates).",
)
@click.option(
    "--sort-by",
    callback=_sort_by,
    metavar="COLUMN|FIELD",
    help="Order by a column (AGE, PRIORITY, DURATION, ...: ascending) or a field of -o json "
    "(.spec.num_csx, .progress.step, .spec.labels.KEY) instead of newest first.",
)
@click.option("--no-headers", is_flag=True, help="Print the table without its header line.")
@click.option(
    "-r",
    "--expand",
    is_flag=True,
    help="A row for every queued task of an array (the table shows an array's queued tasks "
    "as one row, wsjob-…_[3-31%4], as squeue does; -o json, yaml and name list every task).",
)
@click.option("--array", "array_id", default="", metavar="ID", help="Only this array's tasks.")
@click.option(
    "-w",
    "--watch",
    is_flag=True,
    help="After the list, print a line for every change of a listed job (phase, priority, "
    "labels) and every new job, as they happen, until Ctrl-C.",
)
@click.pass_obj
def get_jobs(
    session: Session,
    include_all: bool,
    my_jobs: bool,
    selector: str,
    output: str,
    max_jobs: int | None,
    show_pending: bool,
    sort_by: SortBy | None,
    no_headers: bool,
    watch: bool,
    reasons: tuple[str, ...],
    expand: bool,
    array_id: str,
) -> None:
    """List jobs, newest first: active ones unless -a is given.

    \b
    Table columns: NAME AGE DURATION PHASE TYPE PRIORITY CSX SYSTEMS USER LABELS
    (CSX: its CS-2 count; an elastic job's size now and range, `4 (2-8)`: it started on the
    most free in its range, resumes after a requeue on what is free then, and grows back at a
    checkpoint, reason Growing, when systems are idle and no job waits; --show-pending adds
    PENDING, e.g. `#2: needs 2 systems, 0 free`, and START(EST), e.g. `~5m3s`: an
    estimate; -o wide adds REASON, e.g. `Capacity`, QUEUE, STEP, RESTARTS, PENDING and
    START(EST)). Ages and durations as kubectl prints them. JSON and YAML list
    every job without its params; `csctl get job ID` shows them. -o name prints the job ids
    alone, one a line.

    \b
    Examples:
      csctl get jobs
      csctl get jobs --show-pending
      csctl get jobs -a -l team=nlp,model=gpt3 -o wide
      csctl get jobs -a -l 'team in (nlp,cv),!tmp' --sort-by PRIORITY
      csctl get jobs -a --max-jobs 20 -o json
      csctl get jobs --reason Capacity,BehindHigherPriority -o wide
      csctl get jobs -w
      csctl get jobs --array wsjob-abc123def456gh -r
    """
    client = session.client()
    if watch:
        if max_jobs is not None:
            raise click.UsageError("--max-jobs cannot be used with --watch")
        listed = client.watch_jobs(
            all=include_all, mine=my_jobs, selector=selector, reasons=reasons, array=array_id
        )
        _watch_jobs(
            listed, output=output, pending=show_pending, sort_by=sort_by, headers=not no_headers,
        )  # fmt: skip
        return
    jobs = client.list_jobs(
        all=include_all, mine=my_jobs, selector=selector, limit=max_jobs, reasons=reasons,
        array=array_id,
    )  # fmt: skip
    # Listed summaries carry each queued job's queue position and pending reason: no GetJob.
    now = time.time()
    _sort(jobs, sort_by, now)
    if output in ("json", "yaml"):
        documents = [render.job_document(job, with_params=False) for job in jobs]
        say(render.to_json(documents) if output == "json" else render.to_yaml(documents))
    elif output == "name":
        if jobs:
            say("\n".join(job.id for job in jobs))
    elif jobs:
        if not expand:
            jobs = collapse_queued(jobs, _queued_task, _renamed)
        table = jobs_table(
            jobs, now=now, wide=output == "wide", pending=show_pending, headers=not no_headers
        )
        say("\n".join(table.lines))
    else:
        found_all = include_all or reasons
        say("No jobs found." if found_all else "No active jobs (-a shows finished ones).")


def _queued_task(job: Job) -> tuple[str, int, int] | None:
    task = job.array
    if task is None or job.phase is not Phase.QUEUED:
        return None
    return task.array_id, task.index, task.cap


def _renamed(job: Job, name: str) -> Job:
    return dataclasses.replace(job, id=name)


def _sort(jobs: list[Job], sort_by: SortBy | None, now: float) -> None:
    """Newest first, then (stably) by --sort-by."""
    jobs.sort(key=lambda job: job.created_at, reverse=True)
    if sort_by is None:
        return
    if sort_by.column:
        jobs.sort(key=lambda job: sort_by.key(job, now, None))
    else:
        keys = {job.id: sort_by.key(job, now, render.job_document(job, with_params=False))
                for job in jobs}  # fmt: skip
        jobs.sort(key=lambda job: keys[job.id])


def _watch_jobs(
    batches: Iterator[list[Job] | None],
    *,
    output: str,
    pending: bool,
    sort_by: SortBy | None,
    headers: bool,
) -> None:
    """The listing as `get jobs` prints it, then one line (a table row in the table's widths,
    a name, a one-line JSON document) per change, as `kubectl get -w` does."""
    listed: list[Job] = []
    columns = columns_of(wide=output == "wide", pending=pending)
    table: Table | None = None
    done = False
    for batch in batches:
        if not done:
            if batch is not None:
                listed.extend(batch)
                continue
            done = True
            now = time.time()
            _sort(listed, sort_by, now)
            if output in ("table", "wide"):
                rows = [row(job, columns, now) for job in listed]
                table = Table(columns, rows, headers=headers)
                _print(table.lines)
            else:
                _print(_one_line(job, output) for job in listed)
            continue
        now = time.time()
        if table is not None:
            _print(table.row(row(job, columns, now)) for job in batch or ())
        else:
            _print(_one_line(job, output) for job in batch or ())


def _one_line(job: Job, output: str) -> str:
    """A watched job as -o name or json print it, on one line; yaml: a document."""
    if output == "name":
        return job.id
    document = render.job_document(job, with_params=False)
    if output == "json":
        return json.dumps(document)
    return "---\n" + render.to_yaml(document)


def _print(lines: Iterable[str]) -> None:
    for line in lines:
        say(line)
    sys.stdout.flush()  # a pipe (| grep) sees each change as it happens
