"""`csctl get jobs`, `csctl get job ID`, `csctl cancel job ID...` and `csctl cancel jobs`."""

from __future__ import annotations

import time

import click

from appliance.client import CancelResult
from appliance.domain.errors import Conflict, InvalidSpec, NotFound, PermissionDenied
from appliance.domain.selectors import parse_selectors
from csctl import render
from csctl.completion import complete_job_ids
from csctl.job_tables import (
    job_detail_table,
)
from csctl.render import say
from csctl.session import Session, error_line

_LIST_FORMATS = ("table", "wide", "name", "json", "yaml")
_DETAIL_FORMATS = ("yaml", "json", "table")
_CANCEL_REASON = "cancelled with csctl"


def _selectors(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> str:
    try:
        return str(parse_selectors(values, field="selector"))
    except InvalidSpec as exc:
        raise click.BadParameter(exc.message, ctx=ctx, param=param) from None


# -l of the commands that select jobs: a label selector as kubectl's.
SELECTOR = click.option(
    "-l",
    "--selector",
    "--label",
    "selector",
    multiple=True,
    callback=_selectors,
    metavar="SELECTOR",
    help="Only jobs whose labels match, as kubectl: k=v, k!=v, 'k in (a,b)', "
    "'k notin (a,b)', k, !k, comma-separated (repeatable; all must match).",
)


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


@get.command("job")
@click.argument("job_id", metavar="ID", shell_complete=complete_job_ids)
@click.option(
    "-o",
    "--output",
    type=click.Choice(_DETAIL_FORMATS),
    default="table",
    show_default=True,
    help="table: a summary (the job's row, why it ended or waits, its replicas); yaml or "
    "json: the whole document.",
)
@click.pass_obj
def get_job(session: Session, job_id: str, output: str) -> None:
    """Show one job: a summary by default, as kubectl's `get` does (the job's row, queue
    position, dependencies, attempts, reason and replicas); with -o yaml or -o json, in full:
    spec and params, phase and reasons, queue position, systems, lease, progress, timestamps
    and replicas (node, phase, pid, exit code, data plane, message, log tail).

    \b
    Examples:
      csctl get job wsjob-abc123def456gh
      csctl get job wsjob-abc123def456gh -o yaml
      csctl get job wsjob-abc123def456gh -o json
    """
    job = session.client().get_job(job_id)
    if output == "table":
        say(job_detail_table(job, now=time.time()))
        return
    document = render.job_document(job, with_params=True)
    say(render.to_json(document) if output == "json" else render.to_yaml(document))


@click.group()
def cancel() -> None:
    """Cancel jobs: by id, or every job of a selection in one request.

    \b
    Examples:
      csctl cancel job wsjob-abc123def456gh
      csctl cancel jobs --mine --queued
    """


@cancel.command("job")
@click.argument(
    "job_ids", metavar="ID...", nargs=-1, required=True, shell_complete=complete_job_ids
)
@click.pass_context
def cancel_job(ctx: click.Context, job_ids: tuple[str, ...]) -> None:
    """Cancel one or more jobs; a job that already finished is left as it is. An array's id
    cancels every task of the array; a task's id (wsjob-…_7) that task alone.

    \b
    Examples:
      csctl cancel job wsjob-abc123def456gh
      csctl cancel job wsjob-abc123def456gh wsjob-0123456789abcd
      csctl cancel job wsjob-abc123def456gh_7
    """
    session: Session = ctx.obj
    client = session.client()
    if len(job_ids) == 1:  # one job: its error is the one line csctl prints
        _report_cancel(client.cancel_job(job_ids[0], reason=_CANCEL_REASON), job_ids[0])
        return
    failures = 0
    for job_id in job_ids:
        try:
            result = client.cancel_job(job_id, reason=_CANCEL_REASON)
        except (NotFound, Conflict, PermissionDenied, InvalidSpec) as exc:
            say(f"error: {error_line(exc)}", err=True)
            failures += 1
            continue
        _report_cancel(result, job_id)
    if failures:
        ctx.exit(1)


def _report_cancel(result: CancelResult, asked: str) -> None:
    if asked != result.job.id:  # an array's id: how many of its tasks
        say(result.message)
    elif result.changed:
        say(f"job {result.job.id} cancelled")
    else:
        say(f"job {result.job.id} already {result.job.phase}; nothing to do")


@cancel.command("jobs")
@click.argument("job_ids", metavar="[ID...]", nargs=-1, shell_complete=complete_job_ids)
@click.option(
    "-m", "--mine", "--my-jobs", "mine", is_flag=True,
    help="Your jobs (your token's user; with authentication off, your OS user).",
)  # fmt: skip
@click.option("-u", "--user", default="", help="Only this user's jobs.")
@SELECTOR
@click.option("--queued", is_flag=True, help="Only queued jobs (the same as --phase queued).")
@click.option(
    "--phase", "phases", multiple=True, metavar="PHASE",
    help="Only jobs in this phase: queued, scheduled, initializing or running (repeatable).",
)  # fmt: skip
@click.option(
    "-A", "--all-users", is_flag=True, help="Every user's jobs (admins; -l and --phase narrow it)."
)
@click.option(
    "--reason", default=_CANCEL_REASON, show_default=True, help="Recorded as the reason."
)
@click.pass_context
def cancel_jobs(
    ctx: click.Context,
    job_ids: tuple[str, ...],
    mine: bool,
    user: str,
    selector: str,
    queued: bool,
    phases: tuple[str, ...],
    all_users: bool,
    reason: str,
) -> None:
    """Cancel many jobs in one request, as `scancel -u` does: every active job of a
    selection, or the jobs given by id. A selection says whose jobs or which (--mine,
    --user, -l), or is --all-users; --queued and --phase only narrow it. Jobs you may not
    cancel (others' outside your groups) are left alone and counted; a finished job is
    left as it is. Prints how many were cancelled; exits 1 if any was refused or not found.

    \b
    Examples:
      csctl cancel jobs --mine
      csctl cancel jobs --mine --queued
      csctl cancel jobs -l team=nlp,sweep=7
      csctl cancel jobs -l 'sweep in (7,8),!keep' --queued
      csctl cancel jobs --user alice --phase running
      csctl cancel jobs --all-users --queued
      csctl cancel jobs wsjob-abc123def456gh wsjob-0123456789abcd
    """
    session: Session = ctx.obj
    result = session.client().cancel_jobs(
        mine=mine,
        user=user,
        selector=selector,
        phases=(*phases, "QUEUED") if queued else phases,
        job_ids=job_ids,
        all=all_users,
        reason=reason,
    )
    if not (result.cancelled or result.finished or result.refused or result.not_found):
        say("No active job matched; nothing cancelled.")
        return
    say(f"cancelled {result.cancelled} job{'' if result.cancelled == 1 else 's'}")
    if result.finished:
        say(f"{result.finished} already finished; nothing to do")
    problems = []
    if result.refused:
        problems.append(f"{result.refused} refused: {result.refusal}")
    if result.not_found:
        more = " ..." if result.not_found > 5 else ""
        problems.append(
            f"{result.not_found} not found: {' '.join(result.not_found_ids[:5])}{more}"
        )
    if problems:
        say(f"error: {'; '.join(problems)}", err=True)
        ctx.exit(1)
