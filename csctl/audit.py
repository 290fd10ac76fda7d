"""`csctl get audit`: the audit log (admins): who did or was refused what, newest first."""

from __future__ import annotations

import time
from collections.abc import Sequence

import click

from appliance.domain.audit import MAX_PAGE, AuditEvent
from appliance.domain.errors import InvalidSpec
from appliance.domain.usage import parse_when
from csctl import render
from csctl.jobs import get
from csctl.render import say
from csctl.session import Session

COLUMNS = ("TIME", "USER", "DOOR", "VERB", "OBJECT", "OUTCOME", "REASON")
WIDE_COLUMNS = (*COLUMNS, "GROUPS", "ADMIN", "SOURCE", "REQUEST-ID", "BODY")


def audit_table(events: Sequence[AuditEvent], *, wide: bool = False) -> str:
    rows = []
    for e in events:
        row = [
            render.timestamp(e.at) or "-", e.user or "-", e.door.value, e.verb,
            e.target or "-", e.outcome.value, e.reason or "-",
        ]  # fmt: skip
        if wide:
            body = f"{e.body_sha256[:12]} {e.body_bytes}B" if e.body_bytes >= 0 else "-"
            admin = "yes" if e.admin else "no"
            row += [",".join(e.groups) or "-", admin, e.source or "-", e.request_id, body]
        rows.append(row)
    return render.format_table(WIDE_COLUMNS if wide else COLUMNS, rows)


@get.command("audit")
@click.option("--since", default="", help="24h, 7d, a date, Unix seconds (default: all kept).")
@click.option("--user", default="", help="Only this user's calls.")
@click.option("--verb", default="", help="Only this verb (submit, cancel, node-drain, ...).")
@click.option(
    "--limit",
    type=click.IntRange(1, 100 * MAX_PAGE),
    default=100,
    show_default=True,
    help="Show at most this many events.",
)
@click.option(
    "-o", "--output", type=click.Choice(("table", "wide", "json", "yaml")), default="table"
)
@click.pass_obj
def get_audit(session: Session, since: str, user: str, verb: str, limit: int, output: str) -> None:
    """Admins: the audit log, newest first: every mutating call (submit, cancel, priority,
    labels, queue and node changes, logins) and every refusal at every door, with who, from
    where, what, the outcome and a refusal's reason. Never a token nor a params body.

    \b
    Examples:
      csctl get audit
      csctl get audit --since 24h --user alice
      csctl get audit --verb cancel -o wide
      csctl get audit --since 2026-11-01 -o json
    """
    try:
        start = parse_when(since, time.time(), "since") if since else 0.0
    except InvalidSpec as exc:
        raise click.BadParameter(exc.message, param_hint="--since") from None
    events = session.client().audit_events(since=start, user=user, verb=verb, limit=limit)
    if output == "json":
        say(render.to_json([e.document() for e in events]))
    elif output == "yaml":
        say(render.to_yaml([e.document() for e in events]))
    else:
        say(audit_table(events, wide=output == "wide"))
