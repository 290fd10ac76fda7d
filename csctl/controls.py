"""`csctl label job ID k=v k2-` and `csctl job set-priority ID p1`: changing a submitted job."""

from __future__ import annotations

import click

from appliance.domain.errors import InvalidSpec
from appliance.domain.spec import Priority, validate_labels
from csctl import render
from csctl.completion import complete_job_ids
from csctl.render import say
from csctl.session import Session


def parse_label_changes(args: tuple[str, ...]) -> tuple[dict[str, str], list[str]]:
    """kubectl-style label arguments: `k=v` sets (or changes) a label, `k-` removes it.

    Raises InvalidSpec for an argument that is neither, or a bad key or value.
    """
    to_set: dict[str, str] = {}
    to_remove: list[str] = []
    for arg in args:
        key, sep, value = arg.partition("=")
        if sep:
            to_set[key] = value
        elif arg.endswith("-") and len(arg) > 1:
            to_remove.append(arg[:-1])
        else:
            raise InvalidSpec(
                f"label {arg!r} must be key=value (set) or key- (remove)", field="labels"
            )
    validate_labels(to_set)
    validate_labels(dict.fromkeys(to_remove, ""))
    both = sorted(set(to_set) & set(to_remove))
    if both:
        raise InvalidSpec(f"label {both[0]!r} is both set and removed", field="labels")
    return to_set, to_remove


@click.group()
def label() -> None:
    """Add, change or remove labels.

    \b
    Example:
      csctl label job wsjob-abc123def456gh team=nlp run=7 tmp-
    """


@label.command("job")
@click.argument("job_id", metavar="ID", shell_complete=complete_job_ids)
@click.argument("changes", metavar="KEY=VALUE|KEY-...", nargs=-1, required=True)
@click.pass_context
def label_job(ctx: click.Context, job_id: str, changes: tuple[str, ...]) -> None:
    """Set labels with KEY=VALUE and remove them with KEY- (finished jobs too).

    \b
    Examples:
      csctl label job wsjob-abc123def456gh team=nlp
      csctl label job wsjob-abc123def456gh team=cv run=7 tmp-
    """
    try:
        to_set, to_remove = parse_label_changes(changes)
    except InvalidSpec as exc:
        raise click.BadParameter(exc.message, ctx=ctx, param_hint="KEY=VALUE|KEY-") from None
    session: Session = ctx.obj
    job = session.client().update_labels(job_id, set=to_set, remove=to_remove)
    labels = render.format_labels(job.spec.labels.items()) or "<none>"
    say(f"job {job.id} labeled: {labels}")


@click.group("job")
def job_group() -> None:
    """Change a job's settings.

    \b
    Example:
      csctl job set-priority wsjob-abc123def456gh p1
    """


@job_group.command("set-priority")
@click.argument("job_id", metavar="ID", shell_complete=complete_job_ids)
@click.argument(
    "priority",
    metavar="PRIORITY",
    type=click.Choice([p.name.lower() for p in Priority], case_sensitive=False),
)
@click.pass_obj
def set_priority(session: Session, job_id: str, priority: str) -> None:
    """Change the priority of a queued or running job: p0 (highest, admins) to p3.

    The queue re-orders at once: among queued jobs, higher priority runs first, then older.

    \b
    Examples:
      csctl job set-priority wsjob-abc123def456gh p1
      csctl get jobs --show-pending
    """
    job = session.client().set_priority(job_id, priority)
    if job.array is not None and job.array.array_id == job_id:  # every task of the array
        say(f"the tasks of array {job_id} priority set to {job.spec.priority.name}")
        return
    where = f"; queue position {job.queue_position}" if job.queue_position else ""
    say(f"job {job.id} priority set to {job.spec.priority.name}{where}")
