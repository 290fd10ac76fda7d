"""How csctl prints jobs: tables like the real csctl, and JSON/YAML documents."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import click
import yaml

from appliance.domain.display import printable
from appliance.domain.job import Attempt, Job, Replica
from appliance.domain.timestamps import rfc3339

JOB_COLUMNS = ("NAME", "AGE", "PHASE", "SYSTEMS", "USER", "LABELS")
WIDE_COLUMNS = (*JOB_COLUMNS, "QUEUE", "PRIORITY", "STEP", "RESTARTS", "PENDING")
PENDING_COLUMNS = (*JOB_COLUMNS, "PENDING")
ATTEMPT_COLUMNS = ("ATTEMPT", "SYSTEMS", "FROM-STEP", "RAN", "ENDED", "THEN", "REASON")
REPLICA_COLUMNS = ("REPLICA", "ROLE", "NODE", "PHASE", "PID", "EXIT", "MESSAGE")


def say(text: str = "", *, err: bool = False) -> None:
    """Print one block of output (every csctl line goes through here)."""
    click.echo(printable(text), err=err)


def format_age(seconds: float) -> str:
    """A short relative age: `42s`, `5m`, `18h`, `3d`."""
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def format_labels(labels: Iterable[tuple[str, str]]) -> str:
    """`k=v,k2=v2`, sorted by key."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels))


def format_bytes(size: int) -> str:
    """Binary units like kubectl: `512`, `64Ki`, `1.5Gi`, `16Gi`."""
    value = float(size)
    for unit in ("", "Ki", "Mi", "Gi", "Ti"):
        if abs(value) < 1024 or unit == "Ti":
            text = f"{value:.1f}".removesuffix(".0") if unit else str(int(value))
            return f"{text}{unit}"
        value /= 1024
    raise AssertionError("unreachable")


def job_row(job: Job, *, now: float, wide: bool = False, pending: bool = False) -> list[str]:
    """One table row for `job`; `now` is the Unix time ages are measured from.

    `wide` adds QUEUE, PRIORITY, STEP, RESTARTS and PENDING; `pending` adds only PENDING.
    """
    row = [
        job.id,
        format_age(now - job.created_at) if job.created_at else "-",
        job.phase.value,
        ",".join(job.systems),
        job.user,
        format_labels(job.spec.labels.items()),
    ]
    if wide:
        row += [
            job.spec.queue,
            job.spec.priority.name,
            f"{job.progress.step}/{job.spec.num_steps}",
            str(job.restarts),
            _pending(job),
        ]
    elif pending:
        row.append(_pending(job))
    return row


def jobs_table(
    jobs: Sequence[Job], *, now: float, wide: bool = False, pending: bool = False
) -> str:
    """The `csctl get jobs` table, in the order given."""
    header = WIDE_COLUMNS if wide else PENDING_COLUMNS if pending else JOB_COLUMNS
    rows = [job_row(job, now=now, wide=wide, pending=pending) for job in jobs]
    return format_table(header, rows)


def job_detail_table(job: Job, *, now: float) -> str:
    """`csctl get job ID -o table`: the wide job row, then one row per replica."""
    text = jobs_table([job], now=now, wide=True)
    if job.queue_position:
        text += f"\n\nQUEUE POSITION: {job.queue_position} in queue {job.spec.queue}"
    if job.spec.depends_on:
        text += f"\n\nDEPENDS ON: {', '.join(str(d) for d in job.spec.depends_on)}"
    if job.dependents:
        text += f"\n\nDEPENDENTS: {', '.join(job.dependents)}"
    if job.attempt > 1 or job.spec.max_restarts:
        allowed = "cluster default" if job.spec.max_restarts is None else job.spec.max_restarts
        text += f"\n\nATTEMPT: {job.attempt} (restarts allowed: {allowed})"
    if job.attempts:
        rows = [_attempt_row(a, now) for a in job.attempts]
        text += "\n\n" + format_table(ATTEMPT_COLUMNS, rows)
    if job.reason:
        text += f"\n\nREASON: {job.reason}"
    if job.replicas:
        rows = [_replica_row(replica) for replica in job.replicas]
        text += "\n\n" + format_table(REPLICA_COLUMNS, rows)
    return text


def _attempt_row(a: Attempt, now: float) -> list[str]:
    ran = format_age(a.ended_at - a.started_at) if a.started_at else "-"
    return [
        str(a.number), ",".join(a.systems), str(a.resumed_from), ran,
        f"{format_age(now - a.ended_at)} ago",
        a.ended_in.value, a.reason,
    ]  # fmt: skip


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by three spaces, like kubectl and csctl; a cell is one
    line, whatever its text holds."""
    header, rows = _cells(header), [_cells(row) for row in rows]
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=False)]
    lines = [
        "   ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in (header, *rows)
    ]
    return "\n".join(lines)


def _cells(row: Sequence[str]) -> list[str]:
    return [printable(cell).replace("\n", "\\n").replace("\t", " ") for cell in row]


def job_document(job: Job, *, with_params: bool) -> dict[str, Any]:
    """A job as plain data for JSON/YAML; params (the full YAML) only when asked for."""
    spec: dict[str, Any] = {
        "num_csx": job.spec.num_csx,
        "num_steps": job.spec.num_steps,
        "mode": job.spec.mode.value,
        "priority": job.spec.priority.name,  # P2, as the tables and the REST API write it
        "labels": dict(job.spec.labels),
        "model_dir": job.spec.model_dir,
        "max_restarts": job.spec.max_restarts,
        "preemptible": job.spec.preemptible,
        "queue": job.spec.queue,
        "depends_on": [str(d) for d in job.spec.depends_on],
    }
    if with_params:
        spec["params"] = yaml.safe_load(job.spec.params_yaml) if job.spec.params_yaml else {}
    progress = job.progress
    return {
        "name": job.id,
        "user": job.user,
        "phase": job.phase.value,
        "reason": job.reason,
        "pending_reason": job.pending_reason,
        "queue_position": job.queue_position,
        "systems": list(job.systems),
        "attempt": job.attempt,
        "restarts": job.restarts,
        "attempts": [
            {
                "number": a.number,
                "systems": list(a.systems),
                "reason": a.reason,
                "ended_in": a.ended_in.value,
                "scheduled_at": timestamp(a.scheduled_at),
                "started_at": timestamp(a.started_at),
                "ended_at": timestamp(a.ended_at),
            }
            for a in job.attempts
        ],
        "dependents": list(job.dependents),
        "lease": _lease_document(job),
        "spec": spec,
        "progress": {
            "step": progress.step,
            "num_steps": progress.num_steps,
            "loss": progress.loss,
            "steps_per_second": progress.steps_per_second,
            "samples_per_second": progress.samples_per_second,
            "reported_at": timestamp(progress.reported_at),
            "eval_loss": progress.eval_loss,
            "eval_accuracy": progress.eval_accuracy,
        },
        "created_at": timestamp(job.created_at),
        "updated_at": timestamp(job.updated_at),
        "started_at": timestamp(job.started_at),
        "finished_at": timestamp(job.finished_at),
        "replicas": [_replica_document(replica) for replica in job.replicas],
    }


def to_json(document: Any) -> str:
    """Indented JSON."""
    return json.dumps(document, indent=2)


def to_yaml(document: Any) -> str:
    """Block-style YAML in the given key order; multi-line strings (log tails) as `|` blocks."""
    return yaml.dump(document, Dumper=_BlockDumper, sort_keys=False, allow_unicode=True).rstrip()


class _BlockDumper(yaml.SafeDumper):
    pass


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _represent_str)


def _pending(job: Job) -> str:
    if not job.pending_reason:
        return ""
    if job.queue_position:
        return f"#{job.queue_position}: {job.pending_reason}"
    return job.pending_reason


def _lease_document(job: Job) -> dict[str, Any] | None:
    if job.lease is None:
        return None
    return {
        "holder": job.lease.holder,
        "lease_seconds": job.lease.lease_seconds,
        "expires_at": timestamp(job.lease.expires_at),
    }


def _replica_row(replica: Replica) -> list[str]:
    return [
        replica.name,
        replica.role.value,
        replica.node,
        replica.phase.value,
        str(replica.pid) if replica.pid else "",
        "" if replica.exit_code is None else str(replica.exit_code),
        next(iter(replica.message.splitlines()), ""),
    ]


def _replica_document(replica: Replica) -> dict[str, Any]:
    return {
        "name": replica.name,
        "role": replica.role.value,
        "index": replica.index,
        "node": replica.node,
        "phase": replica.phase.value,
        "address": replica.address,
        "pid": replica.pid,
        "exit_code": replica.exit_code,
        "message": replica.message,
        "log_tail": replica.log_tail,
    }


def timestamp(unix_seconds: float) -> str | None:
    """RFC 3339 as the REST API writes it; None (null) for a moment not happened."""
    return rfc3339(unix_seconds)
