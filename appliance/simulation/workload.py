"""What `appliance simulate` runs: jobs with a submit time, a size, a duration, a priority, a
queue and a user, from a generator or read from a trace file.

A trace is CSV, one of two shapes, told apart by its header line:

- Ours, comma-separated: `submit_time,num_csx,duration,priority,queue,user,time_limit` (the last
  four may be empty or missing: P2, `default`, `sim`, no limit); num_csx a count or an elastic
  job's range `2-8` (its duration is then that on 8). Times are seconds or ISO 8601;
  durations and time limits seconds or Slurm's `[D-]HH:MM:SS`; priorities P0-P3 or 0-3.
- A Slurm accounting export, `sacct --parsable2 -o JobID,Submit,Start,End,Elapsed,NNodes,
  Partition,QOS,User,State` (any order, more columns allowed; `|`-separated): Submit is the
  submit time, NNodes (or AllocNodes) the CS-2 systems, Elapsed (else End - Start) the
  duration, Partition the queue, User the user, and QOS the priority: a QOS naming "high",
  "urgent" or "premium" is P1, one naming "low", "scavenger", "standby" or "preempt" is P3,
  anything else P2; Timelimit, if there, the job's time limit (`1-00:00:00`; `UNLIMITED`,
  `Partition_Limit` or empty: none). Job steps (`123.batch`, `123.0`), jobs that never started
  and rows with a value that cannot be read are left out and counted (LeftOut), never a reason
  to stop.

Every trace is bounded before it is parsed (MAX_TRACE_BYTES, MAX_JOBS), and a bad row of our
CSV is refused with its line number and the column that is wrong. Submit times are made relative to
the first job's.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import io
import math
import random
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from appliance.domain.errors import InvalidSpec
from appliance.domain.queues import DEFAULT_QUEUE
from appliance.domain.spec import Priority

K = TypeVar("K")
MAX_TRACE_BYTES = 64 << 20
MAX_JOBS = 1_000_000
MAX_DURATION = 365 * 86400.0
_ELAPSED = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)$")
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_HIGH = ("high", "urgent", "premium")
_LOW = ("low", "scavenger", "standby", "preempt")
_NEVER_RAN = ("", "unknown", "none")
_NO_LIMIT = ("", "unlimited", "partition_limit", "none", "invalid")


@dataclasses.dataclass(frozen=True)
class SimJob:
    """One job of a workload; `submit_at` in seconds from the start of the simulation."""

    submit_at: float
    num_csx: int
    duration: float
    priority: Priority = Priority.P2
    queue: str = DEFAULT_QUEUE
    user: str = "sim"
    time_limit: float | None = None  # seconds (domain/time_limits.py); None: none
    # Elastic (domain/elastic.py): the fewest systems it runs on, `num_csx` the most (0: fixed);
    # `duration` is then its run time on `num_csx`, longer in proportion on fewer.
    num_csx_min: int = 0


@dataclasses.dataclass(frozen=True)
class Generator:
    """A random workload: Poisson arrivals, sizes and priorities drawn by weight, lognormal
    durations (sigma 0: every job lasts the median)."""

    jobs: int = 1000
    arrivals_per_hour: float = 60.0
    sizes: Mapping[int, float] = dataclasses.field(
        default_factory=lambda: {1: 8, 2: 4, 4: 2, 8: 1, 16: 1}
    )
    median_duration: float = 3600.0
    duration_sigma: float = 1.0
    priorities: Mapping[Priority, float] = dataclasses.field(
        default_factory=lambda: {Priority.P1: 1, Priority.P2: 6, Priority.P3: 3}
    )
    queues: Mapping[str, float] = dataclasses.field(default_factory=lambda: {DEFAULT_QUEUE: 1})
    seed: int = 0

    def workload(self) -> list[SimJob]:
        rng = random.Random(self.seed)
        sizes, size_weights = list(self.sizes), list(self.sizes.values())
        prios, prio_weights = list(self.priorities), list(self.priorities.values())
        queues, queue_weights = list(self.queues), list(self.queues.values())
        at, out = 0.0, []
        for _ in range(self.jobs):
            duration = self.median_duration * math.exp(rng.gauss(0.0, self.duration_sigma))
            out.append(
                SimJob(
                    submit_at=at,
                    num_csx=rng.choices(sizes, size_weights)[0],
                    duration=min(MAX_DURATION, max(0.0, duration)),
                    priority=rng.choices(prios, prio_weights)[0],
                    queue=rng.choices(queues, queue_weights)[0],
                    user=f"user{rng.randrange(20):02d}",
                )
            )
            at += rng.expovariate(self.arrivals_per_hour / 3600.0)
        return out


def weights(text: str, field: str, key: Callable[[str], K]) -> dict[K, float]:
    """`a:3,b:1` as {a: 3.0, b: 1.0} (keys converted by `key`); InvalidSpec naming `field`."""
    out: dict[K, float] = {}
    for part in text.split(","):
        name, sep, weight = part.strip().partition(":")
        if not name.strip():
            raise InvalidSpec(f"{field}: {part.strip()!r} is not NAME:WEIGHT", field=field)
        try:
            value = float(weight) if sep else 1.0
            parsed = key(name.strip())
        except (ValueError, KeyError, InvalidSpec):
            raise InvalidSpec(
                f"{field}: {part.strip()!r} is not NAME:WEIGHT", field=field
            ) from None
        if not (value > 0 and math.isfinite(value)):
            raise InvalidSpec(f"{field}: the weight of {name!r} must be above 0", field=field)
        out[parsed] = value
    if not out:
        raise InvalidSpec(f"{field} is empty", field=field)
    return out


def queue_name(text: str) -> str:
    """A queue's name as the generator's --queue-mix gives it (ValueError if it is not one)."""
    if not _NAME.match(text):
        raise ValueError(text)
    return text


@dataclasses.dataclass
class LeftOut:
    """The rows of a trace that are not simulated, by why: job steps, jobs that never started,
    and (a sacct export only) rows with a value that cannot be read, with the first few lines
    that say which. A site's export is replayed as it is, not refused for one odd row."""

    steps: int = 0
    never_started: int = 0
    unreadable: int = 0
    examples: list[str] = dataclasses.field(default_factory=list)

    @property
    def rows(self) -> int:
        return self.steps + self.never_started + self.unreadable

    def said(self) -> str:
        """One line: what was left out, and why."""
        parts = [f"{self.steps} job steps"] * bool(self.steps)
        parts += [f"{self.never_started} jobs that never started"] * bool(self.never_started)
        if self.unreadable:
            shown = "; ".join(self.examples)
            parts.append(f"{self.unreadable} rows that could not be read (e.g. {shown})")
        return ", ".join(parts)

    def document(self) -> dict[str, object]:
        return {"job_steps": self.steps, "never_started": self.never_started,
                "unreadable": self.unreadable, "unreadable_examples": self.examples}  # fmt: skip


EXAMPLES = 3  # unreadable rows said by line, at most


def read_trace(path: Path) -> tuple[list[SimJob], LeftOut]:
    """The jobs of a trace file, and the rows left out."""
    with path.open("rb") as f:
        data = f.read(MAX_TRACE_BYTES + 1)
    if len(data) > MAX_TRACE_BYTES:
        raise InvalidSpec(
            f"trace: {path} is larger than {MAX_TRACE_BYTES >> 20} MiB", field="trace"
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidSpec(f"trace: {path} is not UTF-8 text", field="trace") from None
    return parse_trace(text)


def parse_trace(text: str) -> tuple[list[SimJob], LeftOut]:
    """Our CSV is refused at its first bad row (someone wrote it to be replayed); a sacct
    export's bad rows are counted and left out (a site exports what it has), but a header
    without the columns it needs is refused."""
    header = text.split("\n", 1)[0]
    slurm = "|" in header
    rows = csv.DictReader(io.StringIO(text), delimiter="|" if slurm else ",")
    if slurm:
        _slurm_header(rows.fieldnames or [])
    jobs: list[SimJob] = []
    left = LeftOut()
    for line, row in enumerate(rows, start=2):
        if len(jobs) >= MAX_JOBS:
            raise InvalidSpec(f"trace: more than {MAX_JOBS} jobs", field="trace")
        if not slurm:
            jobs.append(_our_row(row, line))
            continue
        try:
            job = _slurm_row(row, line, left)
        except InvalidSpec as exc:
            left.unreadable += 1
            if len(left.examples) < EXAMPLES:
                left.examples.append(exc.message.removeprefix("trace "))
            continue
        if job is not None:
            jobs.append(job)
    if not jobs:
        said = f" ({left.said()})" if left.rows else ""
        raise InvalidSpec(f"trace: no job to simulate in it{said}", field="trace")
    first = min(job.submit_at for job in jobs)
    jobs.sort(key=lambda j: j.submit_at)
    return [dataclasses.replace(j, submit_at=j.submit_at - first) for j in jobs], left


def to_queues(jobs: list[SimJob], queues: Collection[str]) -> tuple[list[SimJob], dict[str, int]]:
    """`jobs` with every queue that is not one of `queues` (a sacct Partition this cluster
    does not have: `debug`, `gpu`) replaced by the default queue, and how many jobs each such
    partition had."""
    moved: dict[str, int] = {}
    kept = []
    for job in jobs:
        if job.queue not in queues:
            moved[job.queue] = moved.get(job.queue, 0) + 1
            job = dataclasses.replace(job, queue=DEFAULT_QUEUE)
        kept.append(job)
    return kept, moved


def _our_row(row: Mapping[str, str | None], line: int) -> SimJob:
    missing = [c for c in ("submit_time", "num_csx", "duration") if c not in row]
    if missing:
        raise InvalidSpec(
            f"trace line {line}: no column {missing[0]} (the header names submit_time, num_csx, "
            "duration, priority, queue, user; or use a sacct --parsable2 export)",
            field="trace",
        )
    most, fewest = _range(row.get("num_csx"), line)
    return SimJob(
        submit_at=_time(row.get("submit_time"), line, "submit_time"),
        num_csx=most,
        duration=_duration(row.get("duration"), line, "duration"),
        priority=_priority(row.get("priority"), line),
        queue=_name(row.get("queue"), line, "queue", DEFAULT_QUEUE),
        user=_name(row.get("user"), line, "user", "sim"),
        time_limit=_limit(row.get("time_limit"), line, "time_limit"),
        num_csx_min=fewest,
    )


def _range(value: str | None, line: int) -> tuple[int, int]:
    """num_csx as N, or an elastic job's MIN-MAX (domain/elastic.py): (most, fewest or 0)."""
    text = (value or "").strip()
    if "-" not in text:
        return _count(text, line, "num_csx"), 0
    low, _, high = text.partition("-")
    most, fewest = _count(high, line, "num_csx"), _count(low, line, "num_csx")
    if fewest > most:
        raise _bad(line, "num_csx", text, "a range MIN-MAX with MIN at most MAX")
    return most, fewest if fewest < most else 0


def _slurm_header(columns: Sequence[str]) -> None:
    if "Submit" not in columns or not {"NNodes", "AllocNodes"} & set(columns):
        raise InvalidSpec(
            "trace: a sacct export needs the columns Submit and NNodes (or AllocNodes): "
            "sacct --parsable2 -o JobID,Submit,Start,End,Elapsed,NNodes,Partition,QOS,User",
            field="trace",
        )


def _slurm_row(row: Mapping[str, str | None], line: int, left: LeftOut) -> SimJob | None:
    if "." in (row.get("JobID") or ""):
        left.steps += 1
        return None  # a job step, not a job
    start = (row.get("Start") or "").strip()
    if start.lower() in _NEVER_RAN:
        left.never_started += 1
        return None
    nodes = row.get("NNodes") if "NNodes" in row else row.get("AllocNodes")
    if row.get("Elapsed"):
        duration = _duration(row.get("Elapsed"), line, "Elapsed")
    else:
        end = _time(row.get("End"), line, "End")
        duration = max(0.0, end - _time(start, line, "Start"))
    qos = (row.get("QOS") or "").lower()
    priority = (
        Priority.P1
        if any(word in qos for word in _HIGH)
        else Priority.P3
        if any(word in qos for word in _LOW)
        else Priority.P2
    )
    return SimJob(
        submit_at=_time(row.get("Submit"), line, "Submit"),
        num_csx=_count(nodes, line, "NNodes"),
        duration=duration,
        priority=priority,
        queue=_name(row.get("Partition"), line, "Partition", DEFAULT_QUEUE),
        user=_name(row.get("User"), line, "User", "sim"),
        time_limit=_limit(row.get("Timelimit"), line, "Timelimit"),
    )


def _bad(line: int, column: str, value: object, what: str) -> InvalidSpec:
    shown = str(value)[:40]
    return InvalidSpec(f"trace line {line}: {column} {shown!r} is not {what}", field="trace")


def _time(value: str | None, line: int, column: str) -> float:
    text = (value or "").strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            parsed = dt.datetime.fromisoformat(text)
        except ValueError:
            raise _bad(line, column, text, "a time (seconds or ISO 8601)") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.UTC)
        seconds = parsed.timestamp()
    if not math.isfinite(seconds) or abs(seconds) > 1e11:
        raise _bad(line, column, text, "a time (seconds or ISO 8601)")
    return seconds


def _duration(value: str | None, line: int, column: str) -> float:
    text = (value or "").strip()
    match = _ELAPSED.match(text)
    if match:
        days, hours, minutes, seconds = match.groups()
        if hours is None:  # MM:SS
            hours = "0"
        total = int(days or 0) * 86400 + int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    else:
        try:
            total = float(text)
        except ValueError:
            raise _bad(line, column, text, "a duration (seconds or [D-]HH:MM:SS)") from None
    if not (0 <= total <= MAX_DURATION):
        raise _bad(line, column, text, "a duration from 0 to 365 days")
    return total


def _limit(value: str | None, line: int, column: str) -> float | None:
    """A time limit as sacct writes it (`1-00:00:00`, `30:00`, minutes; `UNLIMITED`,
    `Partition_Limit` or empty: none) or seconds; at least a second, at most 365 days."""
    text = (value or "").strip()
    if text.lower() in _NO_LIMIT:
        return None
    seconds = _duration(text, line, column) if ":" in text else _minutes(text, line, column)
    if seconds < 1:
        raise _bad(line, column, text, "a time limit of a second or more")
    return seconds


def _minutes(text: str, line: int, column: str) -> float:
    """Slurm's bare number for a limit: minutes."""
    if not text.isdigit() or len(text) > 6:
        raise _bad(line, column, text, "a time limit ([D-]HH:MM:SS, minutes, or UNLIMITED)")
    return _duration(str(int(text) * 60), line, column)


def _count(value: str | None, line: int, column: str) -> int:
    text = (value or "").strip()
    if not text.isdigit() or not 1 <= int(text) <= 4096:
        raise _bad(line, column, text, "a number of systems from 1 to 4096")
    return int(text)


def _priority(value: str | None, line: int) -> Priority:
    text = (value or "").strip()
    if not text:
        return Priority.P2
    if text.isdigit() and int(text) in Priority._value2member_map_:
        return Priority(int(text))
    try:
        return Priority.parse(text)
    except InvalidSpec:
        raise _bad(line, "priority", text, "P0-P3") from None


def _name(value: str | None, line: int, column: str, default: str) -> str:
    text = (value or "").strip()
    if not text:
        return default
    if not _NAME.match(text):
        raise _bad(line, column, text, "a name of letters, digits, '-', '_' or '.'")
    return text
