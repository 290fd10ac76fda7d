"""How csctl prints jobs: tables like the real csctl, and JSON/YAML documents."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import click
import yaml

from appliance.domain.display import printable
from appliance.domain.job import Attempt, Job, Replica
from appliance.domain.job_document import job_document as domain_job_document
from appliance.domain.timestamps import rfc3339

ATTEMPT_COLUMNS = ("ATTEMPT", "SYSTEMS", "FROM-STEP", "RAN", "ENDED", "THEN", "REASON")
REPLICA_COLUMNS = ("REPLICA", "ROLE", "NODE", "PHASE", "PID", "EXIT", "DATA PLANE", "MESSAGE")


def say(text: str = "", *, err: bool = False) -> None:
    """Print one block of output (every csctl line goes through here)."""
    click.echo(printable(text), err=err)


def format_age(seconds: float) -> str:
    """A duration as kubectl prints ages (k8s.io/apimachinery duration.HumanDuration): exact
    seconds up to 2 minutes, then two units while the first is small (`2m30s`, `5h3m`,
    `2d3h`), one unit after that (`45m`, `20h`, `9d`), years from 2 years on. A negative
    duration (clocks apart) is `0s` where kubectl prints `<invalid>`."""
    total = int(seconds)
    if total < 0:
        return "0s"
    if total < 120:
        return f"{total}s"
    minutes = total // 60
    if minutes < 10:
        return _two(minutes, "m", total % 60, "s")
    if minutes < 180:
        return f"{minutes}m"
    hours = total // 3600
    if hours < 8:
        return _two(hours, "h", minutes % 60, "m")
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        return _two(days, "d", hours % 24, "h")
    if hours < 24 * 365 * 2:
        return f"{days}d"
    years = days // 365
    if hours < 24 * 365 * 8:
        return _two(years, "y", days % 365, "d")
    return f"{years}y"


def _two(big: int, big_unit: str, small: int, small_unit: str) -> str:
    return f"{big}{big_unit}{small}{small_unit}" if small else f"{big}{big_unit}"


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


def attempt_row(a: Attempt, now: float) -> list[str]:
    ran = format_age(a.ended_at - a.started_at) if a.started_at else "-"
    return [
        str(a.number), ",".join(a.systems), str(a.resumed_from), ran,
        f"{format_age(now - a.ended_at)} ago",
        a.ended_in.value, a.reason,
    ]  # fmt: skip


def format_table(
    header: Sequence[str], rows: Sequence[Sequence[str]], *, headers: bool = True
) -> str:
    """Left-aligned columns separated by three spaces, like kubectl and csctl; a cell is one
    line, whatever its text holds. `headers=False`: the rows only (kubectl --no-headers)."""
    return "\n".join(Table(header, rows, headers=headers).lines)


class Table:
    """A table's lines, and the widths later rows (kubectl get -w) are padded to."""

    def __init__(
        self, header: Sequence[str], rows: Sequence[Sequence[str]], *, headers: bool = True
    ) -> None:
        shown = ([_cells(header)] if headers else []) + [_cells(row) for row in rows]
        self.widths = [0] * len(header)
        for line in shown:
            self._widen(line)
        self.lines = [self._line(line) for line in shown]

    def row(self, cells: Sequence[str]) -> str:
        """One more row, its columns as wide as the table's (or wider, if it needs)."""
        line = _cells(cells)
        self._widen(line)
        return self._line(line)

    def _widen(self, line: Sequence[str]) -> None:
        self.widths = [max(w, len(cell)) for w, cell in zip(self.widths, line, strict=True)]

    def _line(self, line: Sequence[str]) -> str:
        return "   ".join(c.ljust(w) for c, w in zip(line, self.widths, strict=True)).rstrip()


def _cells(row: Sequence[str]) -> list[str]:
    return [printable(cell).replace("\n", "\\n").replace("\t", " ") for cell in row]


def job_document(job: Job, *, with_params: bool) -> dict[str, Any]:
    """A job as plain data for JSON/YAML: the document REST sends (domain/job_document.py), its
    params parsed (spec.params) when asked for, and `name` beside `id` (deprecated: the key
    csctl used before #31; read `id`)."""
    document = domain_job_document(job, parsed_params=with_params)
    return {"id": document.pop("id"), "name": job.id, **document}


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


def replica_row(replica: Replica) -> list[str]:
    return [
        replica.name,
        replica.role.value,
        replica.node,
        replica.phase.value,
        str(replica.pid) if replica.pid else "",
        "" if replica.exit_code is None else str(replica.exit_code),
        replica.data_plane,
        next(iter(replica.message.splitlines()), ""),
    ]


def timestamp(unix_seconds: float) -> str | None:
    """RFC 3339 as the REST API writes it; None (null) for a moment not happened."""
    return rfc3339(unix_seconds)
