"""`csctl get array ID`: an array's tasks, one row each, with the overrides, phase, reason and
final loss and evaluation of each: the view at the end of a sweep, sortable."""

from __future__ import annotations

import click

from appliance.domain.array_view import SORT_KEYS, ArrayTaskRow, array_document, sorted_tasks
from csctl import render
from csctl.jobs import get
from csctl.render import say
from csctl.session import Session

COLUMNS = ("INDEX", "JOB", "OVERRIDES", "PHASE", "STEP", "LOSS", "EVAL-LOSS", "ACCURACY", "REASON")


def _number(value: float | None, form: str = ".4f") -> str:
    return "-" if value is None else format(value, form)


def task_row(row: ArrayTaskRow) -> list[str]:
    overrides = " ".join(f"{k}={v}" for k, v in row.overrides.items()) or "-"
    return [
        str(row.index), row.job_id, overrides, row.phase.value, str(row.step or "-"),
        _number(row.loss), _number(row.eval_loss), _number(row.eval_accuracy, ".1%"),
        row.reason_code or "-",
    ]  # fmt: skip


@get.command("array")
@click.argument("array_id", metavar="ID")
@click.option(
    "--sort",
    type=click.Choice(SORT_KEYS),
    default="index",
    show_default=True,
    help="Order: by index, or best first by final loss, eval loss or eval accuracy.",
)
@click.option("-o", "--output", type=click.Choice(("table", "json", "yaml")), default="table")
@click.pass_obj
def get_array(session: Session, array_id: str, sort: str, output: str) -> None:
    """Show an array's tasks (submitted with --array or --sweep): each task's index, job,
    sweep overrides, phase, last step, final loss, eval loss and accuracy, and the code of
    why it waits or ended (e.g. ArrayTaskLimit: its array runs its %N cap of tasks).

    \b
    Examples:
      csctl get array wsjob-abc123def456gh
      csctl get array wsjob-abc123def456gh --sort loss
      csctl get array wsjob-abc123def456gh -o json
    """
    view = session.client().array(array_id)
    rows = sorted_tasks(view.tasks, sort)
    if output == "json":
        say(render.to_json(array_document(view, rows)))
    elif output == "yaml":
        say(render.to_yaml(array_document(view, rows)))
    else:
        cap = f", at most {view.cap} at once" if view.cap else ""
        say(f"array {view.array_id} of {view.user}: {len(rows)} tasks{cap}")
        say(render.format_table(COLUMNS, [task_row(r) for r in rows]))
