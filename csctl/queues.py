"""`csctl get queues`, `csctl queue set|delete NAME` (admins) and `csctl get usage`: how the
teams share the appliance, and who used what."""

from __future__ import annotations

import csv
import dataclasses
import io
import time
from collections.abc import Sequence
from typing import Any

import click

from appliance.domain.errors import InvalidSpec
from appliance.domain.queues import QueueStatus
from appliance.domain.time_limits import format_time_limit
from appliance.domain.usage import UsageRow, parse_when
from csctl import render
from csctl.jobs import get
from csctl.render import say
from csctl.session import Session

QUEUE_COLUMNS = (
    "NAME", "QUOTA", "USED", "BORROWED", "LENT", "PENDING", "RUNNING", "WEIGHT", "SHARE",
    "DEFAULT-TIME", "MAX-TIME",
)  # fmt: skip
WIDE_QUEUE_COLUMNS = (
    *QUEUE_COLUMNS, "MEMORYX", "BORROW-LIMIT", "LENDS", "GROUPS", "SOURCE", "PER-USER",
)  # fmt: skip
USAGE_COLUMNS = (
    "SYSTEM-HOURS", "MEMORYX-GIB-HOURS", "SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT",
    "WAIT-P50", "WAIT-P95", "PREEMPTIONS", "RESTARTS",
)  # fmt: skip


def queues_table(queues: Sequence[QueueStatus], *, wide: bool = False) -> str:
    rows = []
    for q in queues:
        row = [
            q.spec.name, str(q.quota.systems), str(q.used_systems), str(q.borrowed_systems),
            str(q.lent_systems), str(q.pending), str(q.running), f"{q.spec.weight:g}",
            f"{q.share:.0%}", _time_limit(q.spec.default_time_limit),
            _time_limit(q.spec.max_time_limit),
        ]  # fmt: skip
        if wide:
            row += [
                f"{render.format_bytes(q.used_memoryx_bytes)}/"
                f"{render.format_bytes(q.quota.memoryx_bytes)}",
                _limit(q),
                "yes" if q.spec.lend else "no",
                ",".join(q.spec.groups) or "*",
                q.spec.source.value,
                _per_user(q),
            ]
        rows.append(row)
    return render.format_table(WIDE_QUEUE_COLUMNS if wide else QUEUE_COLUMNS, rows)


def _time_limit(seconds: int | None) -> str:
    """A queue's default or maximum time limit as Slurm writes it (sinfo's DefaultTime and
    TimeLimit columns); "-" when the queue sets none."""
    return "-" if seconds is None else format_time_limit(seconds)


def _limit(q: QueueStatus) -> str:
    systems = "unlimited" if q.spec.borrow_systems is None else str(q.spec.borrow_systems)
    if q.spec.borrow_memoryx_bytes is None:
        return systems
    return f"{systems}/{render.format_bytes(q.spec.borrow_memoryx_bytes)}"


def _per_user(q: QueueStatus) -> str:
    """The queue's caps per user: `running=2,queued=10,systems=4`, those set; `-`: none."""
    caps = (
        ("running", q.spec.max_running_jobs_per_user),
        ("queued", q.spec.max_queued_jobs_per_user),
        ("systems", q.spec.max_systems_per_user),
    )
    return ",".join(f"{name}={cap}" for name, cap in caps if cap is not None) or "-"


def queue_document(q: QueueStatus) -> dict[str, Any]:
    spec = dataclasses.asdict(q.spec)
    spec["source"] = q.spec.source.value
    spec["groups"] = list(q.spec.groups)
    spec["updated_at"] = render.timestamp(q.spec.updated_at)
    status = {
        k: v
        for k, v in dataclasses.asdict(q).items()
        if k not in ("spec", "quota", "weighted_share")
    }
    return {
        **spec,
        "quota": {"systems": q.quota.systems, "memoryx_bytes": q.quota.memoryx_bytes},
        **status,
        "weighted_share": q.weighted_share,
    }


def usage_rows(rows: Sequence[UsageRow]) -> list[list[str]]:
    return [_usage_row(r) for r in rows]


def _usage_row(r: UsageRow) -> list[str]:
    return [
        r.key, f"{r.system_hours:.2f}", f"{r.memoryx_gib_hours:.2f}", str(r.succeeded),
        str(r.failed), str(r.cancelled), str(r.timed_out), render.format_age(r.wait_p50_seconds),
        render.format_age(r.wait_p95_seconds), str(r.preemptions), str(r.restarts),
    ]  # fmt: skip


def usage_csv(by: str, rows: Sequence[UsageRow]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    fields = [f.name for f in dataclasses.fields(UsageRow)]
    writer.writerow([by if f == "key" else f for f in fields])
    for row in rows:
        writer.writerow([getattr(row, f) for f in fields])
    return out.getvalue().rstrip("\n")


@get.command("queues")
@click.option(
    "-o", "--output", type=click.Choice(("table", "wide", "json", "yaml")), default="table"
)
@click.pass_obj
def get_queues(session: Session, output: str) -> None:
    """List the queues: NAME QUOTA USED BORROWED LENT PENDING RUNNING WEIGHT SHARE DEFAULT-TIME
    MAX-TIME.

    QUOTA, USED, BORROWED and LENT count CS-2 systems: BORROWED is what a queue holds beyond
    its quota, LENT what other queues hold of its idle quota. SHARE is its part of the
    cluster's recent usage (decayed; queues with the lowest usage for their WEIGHT borrow
    first). -o wide adds MemoryX, borrowing limits, lending, groups, where it was defined and
    its caps per user (PER-USER: running jobs, queued jobs, systems).

    \b
    Examples:
      csctl get queues
      csctl get queues -o wide
    """
    queues = session.client().queues()
    if output == "json":
        say(render.to_json([queue_document(q) for q in queues]))
    elif output == "yaml":
        say(render.to_yaml([queue_document(q) for q in queues]))
    else:
        say(queues_table(queues, wide=output == "wide"))


@get.command("usage")
@click.option(
    "--since",
    default="30d",
    show_default=True,
    help="30d, 12h, a date (local time unless it names a zone), Unix seconds.",
)
@click.option("--until", default="", help="The end of the window (default: now).")
@click.option(
    "--by",
    type=click.Choice(("user", "group", "queue", "array")),
    default="user",
    show_default=True,
)
@click.option("-o", "--output", type=click.Choice(("table", "json", "csv")), default="table")
@click.pass_obj
def get_usage(session: Session, since: str, until: str, by: str, output: str) -> None:
    """Usage per user, group, queue or array over a window: system-hours, MemoryX GiB-hours, jobs
    by final phase, median and 95th-percentile queue wait, preemptions and restarts.

    A job is charged to its owner, its owner's first group and its queue; an attempt's usage
    is what it held times the part of its run inside the window.

    \b
    Examples:
      csctl get usage
      csctl get usage --since 7d --by queue
      csctl get usage --by array
      csctl get usage --since 2026-11-01 --until 2026-12-01 --by group -o csv
    """
    now = time.time()
    try:
        end = parse_when(until, now, "until") if until else now
        start = parse_when(since, now, "since")
    except InvalidSpec as exc:
        raise click.BadParameter(exc.message, param_hint=f"--{exc.field}") from None
    query, rows = session.client().usage(since=start, until=end, by=by)
    if output == "json":
        document = {
            "since": render.timestamp(query.since), "until": render.timestamp(query.until),
            "by": query.by.value, "rows": [dataclasses.asdict(r) for r in rows],
        }  # fmt: skip
        say(render.to_json(document))
    elif output == "csv":
        say(usage_csv(by, rows))
    else:
        window = f"{render.timestamp(query.since)} to {render.timestamp(query.until)}"
        say(f"usage from {window}, by {query.by.value}")
        say(render.format_table((by.upper(), *USAGE_COLUMNS), usage_rows(rows)))


@click.group("queue")
def queue_group() -> None:
    """Define and delete queues (admins).

    \b
    Examples:
      csctl queue set nlp --systems 2 --weight 2 --groups nlp
      csctl queue set vision --systems 2 --borrow-systems 1 --no-lend
      csctl queue delete vision
    """


@queue_group.command("set")
@click.argument("name")
@click.option("--systems", type=click.IntRange(min=0), help="Nominal quota of CS-2 systems.")
@click.option("--memoryx", help="Nominal MemoryX quota, e.g. 32GiB (default: with systems).")
@click.option("--weight", type=float, help="Fair-share weight, 0.001 to 1e6 (default 1).")
@click.option(
    "--borrow-systems", help="Most systems it may borrow beyond its quota, or unlimited."
)
@click.option("--borrow-memoryx", help="Most MemoryX it may borrow, e.g. 8GiB, or unlimited.")
@click.option("--lend/--no-lend", default=None, help="Lend its idle quota (default: lend).")
@click.option("--groups", help="Comma-separated groups that may submit ('' : anyone).")
@click.option(
    "--max-running-jobs-per-user", metavar="N", help="Jobs one user may run in it, or unlimited."
)
@click.option(
    "--max-queued-jobs-per-user",
    metavar="N",
    help="Jobs one user may have waiting in it (more are refused at submit), or unlimited.",
)
@click.option(
    "--max-systems-per-user",
    metavar="N",
    help="CS-2 systems one user's jobs in it may hold, or unlimited.",
)
@click.option(
    "--default-time",
    help="A job's time limit when it gives none (Slurm's formats: MM, HH:MM:SS, D-HH, ...), "
    "or unlimited.",
)
@click.option("--max-time", help="The most time limit a job may ask for, or unlimited.")
@click.pass_obj
def queue_set(
    session: Session,
    name: str,
    systems: int | None,
    memoryx: str | None,
    weight: float | None,
    borrow_systems: str | None,
    borrow_memoryx: str | None,
    lend: bool | None,
    groups: str | None,
    max_running_jobs_per_user: str | None,
    max_queued_jobs_per_user: str | None,
    max_systems_per_user: str | None,
    default_time: str | None,
    max_time: str | None,
) -> None:
    """Create queue NAME, or change the options given (the others stay as they are).

    A queue change made here stands until the queues file (APPLIANCE_QUEUES_FILE) is edited;
    then the file's definitions replace every queue's.

    \b
    Examples:
      csctl queue set nlp --systems 2
      csctl queue set nlp --weight 2 --groups nlp,ml
      csctl queue set default --borrow-systems 0
      csctl queue set nlp --max-running-jobs-per-user 2 --max-systems-per-user 4
      csctl queue set nlp --default-time 2:00:00 --max-time 1-00:00:00
    """
    member = None if groups is None else [g.strip() for g in groups.split(",") if g.strip()]
    status = session.client().set_queue(
        name, systems=systems, memoryx=memoryx, weight=weight, borrow_systems=borrow_systems,
        borrow_memoryx=borrow_memoryx, lend=lend, groups=member,
        max_running_jobs_per_user=max_running_jobs_per_user,
        max_queued_jobs_per_user=max_queued_jobs_per_user,
        max_systems_per_user=max_systems_per_user,
        default_time_limit=default_time, max_time_limit=max_time,
    )  # fmt: skip
    say(f"queue/{status.spec.name} set")
    say(queues_table([status], wide=True))


@queue_group.command("delete")
@click.argument("name")
@click.pass_obj
def queue_delete(session: Session, name: str) -> None:
    """Delete queue NAME; it must have no job waiting or running.

    \b
    Example:
      csctl queue delete vision
    """
    session.client().delete_queue(name)
    say(f"queue/{name} deleted")
