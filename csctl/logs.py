"""`csctl logs`, `csctl events` and `csctl log-export`: what a job wrote and went through."""

from __future__ import annotations

import collections
import io
import os
import sys
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from appliance.client import ApplianceClient
from appliance.client.progress import describe_event
from appliance.domain.job import JobEvent
from csctl import render
from csctl.completion import complete_job_ids
from csctl.log_order import interleaved
from csctl.render import say
from csctl.session import CsctlError, Session

EVENT_COLUMNS = ("AGE", "FROM", "TO", "REASON")


MAX_TAIL = 100_000


@click.command("logs")
@click.argument("job_id", metavar="ID", shell_complete=complete_job_ids)
@click.option("--replica", "-r", metavar="NAME", help="Only this replica (e.g. cs2-0, chief-0).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new lines until the job ends.")
@click.option(
    "--tail",
    type=click.IntRange(0, MAX_TAIL),
    metavar="N",
    help=f"Only the last N lines written so far (then, with -f, every new one); at most "
    f"{MAX_TAIL:,}.",
)
@click.pass_obj
def logs(
    session: Session, job_id: str, replica: str | None, follow: bool, tail: int | None
) -> None:
    """Print a job's replica logs.

    Every replica's lines in the order they were written (by their time stamps), each
    prefixed with `[replica]`, so the newest come last; or one replica's with --replica.
    With -f, new lines follow until the job is terminal.

    \b
    Examples:
      csctl logs wsjob-abc123def456gh --tail 20
      csctl logs wsjob-abc123def456gh --replica cs2-0 -f
    """
    client = session.client()
    written = interleaved(client.logs(job_id, replica))
    for name, line in written[len(written) - tail :] if tail is not None else written:
        say(line if replica else f"[{name}] {line}")
    if not follow:
        return
    sys.stdout.flush()
    shown = collections.Counter(name for name, _ in written)
    for name, line in client.logs(job_id, replica, follow=True):
        if shown[name] > 0:  # printed above (or left out by --tail): logs only grow
            shown[name] -= 1
            continue
        say(line if replica else f"[{name}] {line}")
        sys.stdout.flush()


@click.command("events")
@click.argument("job_id", metavar="ID", shell_complete=complete_job_ids)
@click.option(
    "--follow", "-f", is_flag=True, help="Keep printing phase changes and progress until the end."
)
@click.pass_obj
def events(session: Session, job_id: str, follow: bool) -> None:
    """Show a job's phase changes.

    The recorded events as a table (AGE FROM TO REASON). With -f, the recorded events as
    lines, then live phase changes and progress, until the job is terminal.

    \b
    Examples:
      csctl events wsjob-abc123def456gh
      csctl events wsjob-abc123def456gh -f
    """
    client = session.client()
    if follow:
        for event in client.watch(job_id):
            say(describe_event(event))
            sys.stdout.flush()
        return
    say(events_table(client.events(job_id), now=time.time()))


def events_table(recorded: Sequence[JobEvent], *, now: float) -> str:
    """The recorded events with relative ages, oldest first."""
    rows = [
        [
            render.format_age(now - event.time) if event.time else "-",
            str(event.from_phase or ""),
            str(event.to_phase or ""),
            event.reason,
        ]
        for event in recorded
    ]
    return render.format_table(EVENT_COLUMNS, rows)


def event_document(event: JobEvent) -> dict[str, Any]:
    """A recorded event as plain data for JSON."""
    return {
        "seq": event.seq,
        "time": render.timestamp(event.time),
        "from_phase": str(event.from_phase) if event.from_phase else None,
        "to_phase": str(event.to_phase) if event.to_phase else None,
        "reason": event.reason,
        "reason_code": event.reason_code,
    }


@click.command("log-export")
@click.argument("job_id", metavar="ID", shell_complete=complete_job_ids)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="The zip file to write (default: ID.zip in the current directory).",
)
@click.pass_obj
def log_export(session: Session, job_id: str, output: Path | None) -> None:
    """Export a finished job's logs, status and events as a zip.

    The zip holds every replica's log (ID/logs/REPLICA.log), the job's status
    (ID/status.yaml) and its events (ID/events.json). A job that is still active is refused:
    export it once it has ended.

    \b
    Examples:
      csctl log-export wsjob-abc123def456gh
      csctl log-export wsjob-abc123def456gh -o /tmp/run.zip
    """
    client = session.client()
    job = client.get_job(job_id)
    if not job.phase.terminal:
        raise CsctlError(
            f"job {job_id} is {job.phase}; export its logs once it has finished "
            f"(`csctl logs {job_id} -f` follows them meanwhile)"
        )
    path = output or Path(f"{job_id}.zip")
    replica_logs = _replica_logs(client, job_id, [r.name for r in job.replicas])
    recorded = client.events(job_id)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, lines in replica_logs.items():
            archive.writestr(f"{job_id}/logs/{name}.log", "".join(f"{ln}\n" for ln in lines))
        status = render.to_yaml(render.job_document(job, with_params=True)) + "\n"
        archive.writestr(f"{job_id}/status.yaml", status)
        documents = [event_document(event) for event in recorded]
        archive.writestr(f"{job_id}/events.json", render.to_json(documents) + "\n")
    _write_atomically(path, buffer.getvalue())
    say(f"wrote {path}: {len(replica_logs)} replica logs, status and {len(recorded)} events")


def _replica_logs(client: ApplianceClient, job_id: str, names: list[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {name: [] for name in names}
    for name, line in client.logs(job_id):
        found.setdefault(name, []).append(line)
    return found


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_bytes(data)
        temporary.replace(path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise CsctlError(f"cannot write {path}: {exc.strerror or exc}") from None
