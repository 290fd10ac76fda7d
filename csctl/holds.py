"""`csctl hold|release|suspend|resume job ID...`: Slurm's scontrol hold, release, suspend and
resume (#37). A held job keeps its place in its queue and waits until released; a suspended
one checkpoints, gives its systems back and waits until resumed."""

from __future__ import annotations

from collections.abc import Callable

import click

from appliance.client import ApplianceClient, HoldResult
from appliance.domain.errors import Conflict, InvalidSpec, NotFound, PermissionDenied
from csctl.completion import complete_job_ids
from csctl.render import say
from csctl.session import Session, error_line

Act = Callable[[ApplianceClient, str], HoldResult]


def _for_each(ctx: click.Context, job_ids: tuple[str, ...], act: Act) -> None:
    """`act` on each job, saying what it did; one job's error is the one line csctl prints,
    several jobs' each on its line, exiting 1 if any failed."""
    session: Session = ctx.obj
    client = session.client()
    if len(job_ids) == 1:
        say(act(client, job_ids[0]).message)
        return
    failures = 0
    for job_id in job_ids:
        try:
            say(act(client, job_id).message)
        except (NotFound, Conflict, PermissionDenied, InvalidSpec) as exc:
            say(f"error: {error_line(exc)}", err=True)
            failures += 1
    if failures:
        ctx.exit(1)


def _command(verb: str, act: Act, summary: str, example: str) -> click.Group:
    """The group `csctl VERB` with its command `job ID...`."""

    @click.group(verb, help=f"{summary}\n\n\b\nExample:\n  csctl {verb} job {example}")
    def group() -> None:
        pass

    @group.command("job", help=f"{summary}\n\n\b\nExample:\n  csctl {verb} job {example}")
    @click.argument(
        "job_ids", metavar="ID...", nargs=-1, required=True, shell_complete=complete_job_ids
    )
    @click.pass_context
    def job(ctx: click.Context, job_ids: tuple[str, ...]) -> None:
        _for_each(ctx, job_ids, act)

    return group


_JOB = "wsjob-abc123def456gh"
hold = _command(
    "hold",
    lambda client, job_id: client.hold_job(job_id),
    "Hold queued jobs: each keeps its place in its queue and waits until released (yours; "
    "admins: anyone's, and only an admin releases an admin's hold).",
    f"{_JOB} wsjob-0123456789abcd",
)
release = _command(
    "release",
    lambda client, job_id: client.release_job(job_id),
    "Release held jobs: each takes its place in its queue again.",
    _JOB,
)
suspend = _command(
    "suspend",
    lambda client, job_id: client.suspend_job(job_id),
    "Suspend running jobs: each checkpoints, gives its systems back and waits, held, until "
    "resumed.",
    _JOB,
)
resume = _command(
    "resume",
    lambda client, job_id: client.resume_job(job_id),
    "Resume suspended jobs: each goes on from the checkpoint it wrote when suspended.",
    _JOB,
)
