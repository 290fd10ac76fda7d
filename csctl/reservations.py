"""`csctl reservation create|list|delete` (#37; Slurm's scontrol create reservation): admins
book CS-2 systems (and MemoryX/SwarmX nodes) for a window, for maintenance or for named users,
groups or a queue; anyone lists them. `csctl get systems` shows each system's."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Sequence
from typing import Any

import click

from appliance.domain.errors import InvalidSpec
from appliance.domain.reservations import Reservation
from appliance.domain.time_limits import parse_time_limit
from appliance.domain.usage import parse_when
from csctl import render
from csctl.render import say
from csctl.session import Session

RESERVATION_COLUMNS = ("NAME", "STATE", "START", "END", "NODES", "FOR", "CREATOR")
_FORMATS = ("table", "json", "yaml")
_AGO = re.compile(r"[0-9.]+\s*[smhdw]")  # get usage's "a duration ago"


def parse_moment(text: str, now: float, field: str = "start") -> float:
    """`now`, `now+DURATION` (a duration as Slurm writes a time limit: `now+30` is in half an
    hour, `now+1-00:00:00` tomorrow), a date or date-time (local time unless it names a zone),
    or Unix seconds; InvalidSpec naming `field` otherwise. A bare duration (`2h`) is refused:
    for `get usage --since` it means ago, which no reservation window wants."""
    text = text.strip()
    if text == "now":
        return now
    if text.startswith("now+"):
        return now + parse_time_limit(text[4:], field)
    if not _AGO.fullmatch(text):
        with contextlib.suppress(InvalidSpec):
            return parse_when(text, now, field)
    raise InvalidSpec(
        f"{field} {text[:40]!r} is not a time: use now, now+DURATION (now+90 is in 90 "
        "minutes, now+1-00:00:00 in a day), a date such as 2026-12-01 (or 2026-12-01T09:00), "
        "or Unix seconds",
        field=field,
    )


def parse_nodes(text: str | None, field: str) -> int | list[str] | None:
    """A count (`2`) or comma-separated names (`cs2-01,cs2-02`)."""
    if text is None:
        return None
    text = text.strip()
    if text.isdigit() and len(text) <= 6:
        return int(text)
    return [name.strip() for name in text.split(",") if name.strip()]


def reservations_table(found: Sequence[Reservation], now: float) -> str:
    rows = [
        [
            r.name,
            r.state(now),
            render.timestamp(r.start) or "-",
            render.timestamp(r.end) or "-",
            ",".join(r.nodes),
            r.audience,
            r.creator,
        ]
        for r in found
    ]
    return render.format_table(RESERVATION_COLUMNS, rows)


def _document(r: Reservation, now: float) -> dict[str, Any]:
    return {
        "name": r.name, "state": r.state(now), "start": render.timestamp(r.start),
        "end": render.timestamp(r.end), "nodes": list(r.nodes), "maint": r.maint,
        "users": list(r.users), "groups": list(r.groups), "queue": r.queue,
        "creator": r.creator, "created_at": render.timestamp(r.created_at),
    }  # fmt: skip


@click.group("reservation", short_help="Book systems for a window (admins); list them.")
def reservation_group() -> None:
    """Book CS-2 systems (and MemoryX/SwarmX nodes) for a window: for maintenance (no job may
    run into it: a job whose time limit would reach it waits or runs elsewhere) or for users,
    groups or a queue (only their jobs may use the nodes then, and use them first).

    \b
    Examples:
      csctl reservation create fan-swap --maint --systems cs2-02 --start now+60 --duration 2:00:00
      csctl reservation create demo --systems 2 --users alice,bob --start 2026-12-01T09:00 \\
          --end 2026-12-01T17:00
      csctl reservation list
      csctl reservation delete demo
    """


@reservation_group.command("create")
@click.argument("name")
@click.option(
    "--start",
    default="now",
    show_default=True,
    help="now; now+DURATION (now+90: in 90 minutes; now+1-00:00:00); a date or date-time "
    "(2026-12-01T09:00, local time); or Unix seconds.",
)
@click.option("--end", help="As --start: now+8:00:00, 2026-12-01T17:00, or Unix seconds.")
@click.option("--duration", help="Instead of --end: 2:00:00, 1-00:00:00, 90 (minutes).")
@click.option("--systems", required=True, help="A count (2), or names (cs2-01,cs2-02).")
@click.option("--memoryx", help="A count, or names of MemoryX nodes.")
@click.option("--swarmx", help="A count, or names of SwarmX nodes.")
@click.option("--maint", is_flag=True, help="Maintenance: no job may run into the window.")
@click.option("--users", default="", help="Comma-separated users whose jobs may use it.")
@click.option("--groups", default="", help="Comma-separated groups whose jobs may use it.")
@click.option("--queue", default="", help="A queue whose jobs may use it.")
@click.pass_obj
def reservation_create(
    session: Session, name: str, start: str, end: str | None, duration: str | None,
    systems: str, memoryx: str | None, swarmx: str | None, maint: bool, users: str,
    groups: str, queue: str,
) -> None:  # fmt: skip
    """Book nodes for a window [start, end); refused, naming the field, when it ends in the
    past, overlaps a maintenance window on the same nodes, or asks more than is free.

    \b
    Examples:
      csctl reservation create fan-swap --maint --systems cs2-02 --start now+60 --duration 2:00:00
      csctl reservation create demo --systems 2 --users alice --groups nlp --duration 8:00:00
    """
    now = time.time()
    try:
        # `now` is left to the coordinator's clock (0), which may differ from this one's.
        begins = 0.0 if start.strip() == "now" else parse_moment(start, now, "start")
        ends = parse_moment(end, now, "end") if end else 0.0
        lasts = parse_time_limit(duration, "duration") if duration else 0.0
    except InvalidSpec as exc:
        raise click.UsageError(exc.message) from None
    made = session.client().create_reservation(
        name, start=begins, end=ends, duration=lasts, maint=maint,
        systems=parse_nodes(systems, "systems"), memoryx=parse_nodes(memoryx, "memoryx"),
        swarmx=parse_nodes(swarmx, "swarmx"), users=_split(users), groups=_split(groups),
        queue=queue,
    )  # fmt: skip
    say(f"reservation/{made.name} created: {','.join(made.nodes)} "
        f"from {render.timestamp(made.start)} to {render.timestamp(made.end)}")  # fmt: skip


@reservation_group.command("list")
@click.option("-o", "--output", type=click.Choice(_FORMATS), default="table", show_default=True)
@click.pass_obj
def reservation_list(session: Session, output: str) -> None:
    """List the reservations not ended (ended ones are dropped): NAME STATE START END NODES
    FOR CREATOR.

    \b
    Examples:
      csctl reservation list
      csctl reservation list -o yaml
    """
    found, now = session.client().reservations(), time.time()
    if output == "json":
        say(render.to_json([_document(r, now) for r in found]))
    elif output == "yaml":
        say(render.to_yaml([_document(r, now) for r in found]))
    else:
        say(reservations_table(found, now))


@reservation_group.command("delete")
@click.argument("name")
@click.pass_obj
def reservation_delete(session: Session, name: str) -> None:
    """Delete reservation NAME.

    \b
    Example:
      csctl reservation delete demo
    """
    session.client().delete_reservation(name)
    say(f"reservation/{name} deleted")


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]
