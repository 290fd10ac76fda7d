"""`csctl get limits`: the caller's per-user limits (streams, request rate, queued jobs,
running systems) and
what they use of them now; admins may name another user."""

from __future__ import annotations

from typing import Any

import click

from appliance.domain.limits import LimitsReport
from csctl import render
from csctl.jobs import get
from csctl.render import say
from csctl.session import Session

COLUMNS = ("LIMIT", "CAP", "USED")


def _cap(value: float | None, unit: str = "") -> str:
    return "unlimited" if value is None else f"{value:g}{unit}"


def limits_table(r: LimitsReport) -> str:
    caps = r.caps
    rows = [
        ["streams", _cap(caps.streams), str(r.streams_open)],
        [
            "requests",
            f"{_cap(caps.requests_per_second, '/s')} (burst {caps.burst})",
            f"{caps.burst - r.tokens_left:.0f} of the burst",
        ],
        ["queued jobs", _cap(caps.queued_jobs), str(sum(r.waiting.values()))],
    ]
    for queue, cap in sorted(r.queue_caps.items()):
        rows.append([f"queued jobs in {queue}", str(cap), str(r.waiting.get(queue, 0))])
    rows.append(["running systems", _cap(caps.running_systems), str(r.running_systems)])
    state = "on" if r.enabled else "off: nothing is capped"
    return f"limits of {r.user} ({state})\n" + render.format_table(COLUMNS, rows)


def limits_document(r: LimitsReport) -> dict[str, Any]:
    caps = r.caps
    return {
        "user": r.user,
        "enabled": r.enabled,
        "caps": {
            "streams": caps.streams,
            "requests_per_second": caps.requests_per_second,
            "burst": caps.burst,
            "queued_jobs": caps.queued_jobs,
            "running_systems": caps.running_systems,
        },
        "streams_open": r.streams_open,
        "requests_left": round(r.tokens_left, 2),
        "queued_jobs": sum(r.waiting.values()),
        "queued_by_queue": dict(r.waiting),
        "queue_caps": dict(r.queue_caps),
        "running_systems": r.running_systems,
    }


@get.command("limits")
@click.option("--user", "-u", default="", help="Another user's limits (admins).")
@click.option("-o", "--output", type=click.Choice(("table", "json", "yaml")), default="table")
@click.pass_obj
def get_limits(session: Session, user: str, output: str) -> None:
    """Show your per-user limits and what you use of them now: streams open at once
    (watches, followed logs, event streams, dashboard feeds), the request rate (a token
    bucket: its rate and burst), jobs waiting to run, in all and per queue, and the CS-2
    systems your admitted jobs hold (a job that would go over that cap waits in the queue).

    \b
    Examples:
      csctl get limits
      csctl get limits --user alice -o yaml
    """
    report = session.client().limits(user)
    if output == "json":
        say(render.to_json(limits_document(report)))
    elif output == "yaml":
        say(render.to_yaml(limits_document(report)))
    else:
        say(limits_table(report))
