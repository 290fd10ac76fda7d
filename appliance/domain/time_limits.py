"""Time limits, as Slurm's `--time`: how long a job may run, and its queue's default and most.

A limit is written as Slurm writes one: `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM` or
`D-HH:MM:SS` (so `30` is thirty minutes, `1-12` a day and a half), of at most
MAX_TIME_LIMIT_SECONDS and at least a second. Only time spent RUNNING counts against it, summed
over the job's attempts: waiting in the queue, or preempted and queued again, does not. A job
that gives none gets its queue's default (none: its maximum, as Slurm's partitions; neither:
unlimited); one over its queue's maximum is
refused at submit naming both.
"""

from __future__ import annotations

import re
from typing import Any

from appliance.domain.errors import InvalidSpec

MAX_TIME_LIMIT_SECONDS = 365 * 86400
MAX_TIME_LIMIT_CHARS = 32  # bounded before it is parsed
FORMATS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"
UNLIMITED = "unlimited"
# D-HH[:MM[:SS]], or [[HH:]MM:]SS read as Slurm reads it: one number is minutes.
_DAYS = re.compile(r"(\d{1,6})-(\d{1,2})(?::(\d{1,2}))?(?::(\d{1,2}))?", re.ASCII)
_CLOCK = re.compile(r"(\d{1,6})(?::(\d{1,2}))?(?::(\d{1,2}))?", re.ASCII)


def parse_time_limit(text: Any, field: str = "time_limit") -> int:
    """The seconds `text` says, in one of Slurm's forms (FORMATS); InvalidSpec naming `field`
    for anything else, for 0 and for more than MAX_TIME_LIMIT_SECONDS."""
    shown = repr(text)[:40]
    if not isinstance(text, str) or len(text) > MAX_TIME_LIMIT_CHARS:
        raise InvalidSpec(f"{field} must be a time limit ({FORMATS}), got {shown}", field=field)
    text = text.strip()
    if match := _DAYS.fullmatch(text):
        days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    elif match := _CLOCK.fullmatch(text):
        first, second, third = match.groups()
        if third is not None:  # HH:MM:SS
            days, hours, minutes, seconds = 0, int(first), int(second), int(third)
        elif second is not None:  # MM:SS
            days, hours, minutes, seconds = 0, 0, int(first), int(second)
        else:  # MM
            days, hours, minutes, seconds = 0, 0, int(first), 0
    else:
        raise InvalidSpec(f"{field} must be a time limit ({FORMATS}), got {shown}", field=field)
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if not 0 < total <= MAX_TIME_LIMIT_SECONDS:
        raise InvalidSpec(
            f"{field} must be from 1 second to {MAX_TIME_LIMIT_SECONDS // 86400} days, "
            f"got {shown}",
            field=field,
        )
    return total


def format_time_limit(seconds: int | None) -> str:
    """`seconds` as Slurm shows a limit: `D-HH:MM:SS` (`HH:MM:SS` under a day); None:
    "unlimited"."""
    if seconds is None:
        return UNLIMITED
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def parse_queue_time_limit(value: Any, field: str) -> int | None:
    """A queue's default or maximum: seconds, a limit in one of Slurm's forms, or None or
    "unlimited" for none."""
    if value is None or value == UNLIMITED:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 < value <= MAX_TIME_LIMIT_SECONDS:
            raise InvalidSpec(
                f"{field} must be from 1 second to {MAX_TIME_LIMIT_SECONDS // 86400} days, "
                f"got {value}",
                field=field,
            )
        return value
    return parse_time_limit(value, field)


def limit_in_queue(
    seconds: int | None, queue: str, default: int | None, most: int | None
) -> int | None:
    """The limit a job of `seconds` (None: it gave none) runs with in `queue`: its own, else
    the queue's default, else (as Slurm's partitions) its maximum; InvalidSpec naming
    time_limit when its own is over the queue's maximum."""
    if seconds is None:
        return most if default is None else default if most is None else min(default, most)
    if most is not None and seconds > most:
        raise InvalidSpec(
            f"time_limit {format_time_limit(seconds)} is over queue {queue}'s maximum of "
            f"{format_time_limit(most)}; ask for at most that",
            field="time_limit",
        )
    return seconds
