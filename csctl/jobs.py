"""`csctl get jobs`, `csctl get job ID` and `csctl cancel job ID...`."""

from __future__ import annotations

import time

import click

from appliance.client import CancelResult
from appliance.domain.errors import Conflict, InvalidSpec, NotFound, PermissionDenied
from appliance.domain.spec import parse_label_selector
from csctl import render
from csctl.render import say
from csctl.session import Session, error_line

_LIST_FORMATS = ("table", "wide", "json", "yaml")
_DETAIL_FORMATS = ("yaml", "json", "table")
_CANCEL_REASON = "cancelled with csctl"


def _label_selector(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[str, str]:
    selector: dict[str, str] = {}
    for value in values:
        try:
            selector.update(parse_label_selector(value))
        except InvalidSpec as exc:
            raise click.BadParameter(exc.message, ctx=ctx, param=param) from None
    return selector


@click.group()
def get() -> None:
    """Show jobs, systems and nodes.

    \b
    Examples:
      csctl get jobs
      csctl get job wsjob-abc123def456gh
      csctl get systems
      csctl get nodes
      csctl get nodegroups
    """


@get.command("jobs")
@click.option("-a", "--all", "include_all", is_flag=True, help="Include finished jobs.")
@click.option("-m", "--my-jobs", is_flag=True, help="Only jobs of the current OS user.")
@click.option(
    "-l",
    "--label",
    "labels",
    multiple=True,
    callback=_label_selector,
    metavar="K=V[,K=V]",
    help="Only jobs carrying every given label (repeatable).",
)
@click.option(
    "-o", "--output", type=click.Choice(_LIST_FORMATS), default="table", show_default=True
)
@click.option("--max-jobs", type=click.IntRange(min=1), help="Show at most N jobs (newest).")
@click.option(
    "--show-pending",
    is_flag=True,
    help="Add a PENDING column: queue position and what a queued job waits for.",
)
@click.pass_obj
def get_jobs(
    session: Session,
    include_all: bool,
    my_jobs: bool,
    labels: dict[str, str],
    output: str,
    max_jobs: int | None,
    show_pending: bool,
) -> None:
    """List jobs, newest first: active ones unless -a is given.

    \b
    Table columns: NAME AGE PHASE SYSTEMS USER LABELS
    (--show-pending adds PENDING, e.g. `#2: needs 2 systems, 0 free`;
    -o wide adds PRIORITY, STEP and PENDING). JSON and YAML list every job without its
    params; `csctl get job ID` shows them.

    \b
    Examples:
      csctl get jobs
      csctl get jobs --show-pending
      csctl get jobs -a -l team=nlp,model=gpt3 -o wide
      csctl get jobs -a --max-jobs 20 -o json
    """
    jobs = session.client().list_jobs(
        all=include_all,
        mine=my_jobs,
        labels=labels,
        limit=max_jobs,
    )
    # Listed summaries carry each queued job's queue position and pending reason: no GetJob.
    jobs.sort(key=lambda job: job.created_at, reverse=True)
    if output in ("json", "yaml"):
        documents = [render.job_document(job, with_params=False) for job in jobs]
        say(render.to_json(documents) if output == "json" else render.to_yaml(documents))
    elif jobs:
        table = render.jobs_table(
            jobs, now=time.time(), wide=output == "wide", pending=show_pending
        )
        say(table)
    else:
        say("No jobs found." if include_all else "No active jobs (-a shows finished ones).")


@get.command("job")
@click.argument("job_id", metavar="ID")
@click.option(
    "-o", "--output", type=click.Choice(_DETAIL_FORMATS), default="yaml", show_default=True
)
@click.pass_obj
def get_job(session: Session, job_id: str, output: str) -> None:
    """Show one job in full: spec and params, phase and reasons, queue position, systems,
    lease, progress, timestamps and replicas (node, phase, pid, exit code, message, log tail).

    \b
    Examples:
      csctl get job wsjob-abc123def456gh
      csctl get job wsjob-abc123def456gh -o json
    """
    job = session.client().get_job(job_id)
    if output == "table":
        say(render.job_detail_table(job, now=time.time()))
        return
    document = render.job_document(job, with_params=True)
    say(render.to_json(document) if output == "json" else render.to_yaml(document))


@click.group()
def cancel() -> None:
    """Cancel jobs.

    \b
    Example:
      csctl cancel job wsjob-abc123def456gh
    """


@cancel.command("job")
@click.argument("job_ids", metavar="ID...", nargs=-1, required=True)
@click.pass_context
def cancel_job(ctx: click.Context, job_ids: tuple[str, ...]) -> None:
    """Cancel one or more jobs; a job that already finished is left as it is.

    \b
    Examples:
      csctl cancel job wsjob-abc123def456gh
      csctl cancel job wsjob-abc123def456gh wsjob-0123456789abcd
    """
    session: Session = ctx.obj
    client = session.client()
    if len(job_ids) == 1:  # one job: its error is the one line csctl prints
        _report_cancel(client.cancel_job(job_ids[0], reason=_CANCEL_REASON))
        return
    failures = 0
    for job_id in job_ids:
        try:
            result = client.cancel_job(job_id, reason=_CANCEL_REASON)
        except (NotFound, Conflict, PermissionDenied, InvalidSpec) as exc:
            say(f"error: {error_line(exc)}", err=True)
            failures += 1
            continue
        _report_cancel(result)
    if failures:
        ctx.exit(1)


def _report_cancel(result: CancelResult) -> None:
    if result.changed:
        say(f"job {result.job.id} cancelled")
    else:
        say(f"job {result.job.id} already {result.job.phase}; nothing to do")
