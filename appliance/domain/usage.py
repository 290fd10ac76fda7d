"""Usage accounting (the idea of Slurm's sreport/sacct): per user, group or queue over a time
window, what jobs held and how they fared.

A job's usage is what each of its attempts held (CS-2 systems; MemoryX bytes) times the part
of the attempt's hold (from its scheduling to its end, or to now while it holds) inside the
window. A job is charged to its owner, its owner's first group when it was submitted (the
account group; none: "-") and its queue. Jobs by final phase count the jobs that ended in the
window; queue waits are those of attempts scheduled in the window (from submit or requeue to
scheduling); preemptions and restarts count the attempts that ended in the window by going back
to the queue (preempted by another job, or anything else).
"""

from __future__ import annotations

import dataclasses
import enum
import re
from datetime import datetime

from appliance.domain.errors import InvalidSpec

MAX_WINDOW_SECONDS = 10 * 366 * 86_400.0
DEFAULT_WINDOW_SECONDS = 30 * 86_400.0


class UsageBy(enum.StrEnum):
    USER = "user"
    GROUP = "group"
    QUEUE = "queue"
    ARRAY = "array"  # an array's tasks together (#37); jobs of no array as "-"

    @classmethod
    def parse(cls, text: str) -> UsageBy:
        try:
            return cls(text or "user")
        except ValueError:
            raise InvalidSpec(
                f"by {text[:32]!r} is not one of user, group, queue", field="by"
            ) from None


@dataclasses.dataclass(frozen=True)
class UsageQuery:
    since: float
    until: float
    by: UsageBy = UsageBy.USER


@dataclasses.dataclass(frozen=True)
class UsageRow:
    key: str  # the user, group ("-": none) or queue
    system_hours: float = 0.0
    memoryx_gib_hours: float = 0.0
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    wait_p50_seconds: float = 0.0
    wait_p95_seconds: float = 0.0
    preemptions: int = 0
    restarts: int = 0
    attempts: int = 0  # attempts scheduled in the window (what the waits are of)
    timed_out: int = 0  # jobs that ended TIMEOUT (their time limit reached)


def usage_query(since: float, until: float, by: str, now: float) -> UsageQuery:
    """The window asked for, checked: `until` 0 is now, `since` 0 is 30 days before it."""
    for name, value in (("since", since), ("until", until)):
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or value != value or not 0 <= value < 1e11:
            raise InvalidSpec(
                f"{name} must be a time after 1970 (Unix seconds below 1e11), got "
                f"{str(value)[:40]}",
                field=name,
            )
    until = until or now
    since = since or until - DEFAULT_WINDOW_SECONDS  # 0: not given
    if since >= until:
        raise InvalidSpec("since must be before until", field="since")
    if until - since > MAX_WINDOW_SECONDS:
        raise InvalidSpec("the window may be at most 10 years long", field="since")
    return UsageQuery(float(since), float(until), UsageBy.parse(by))


_DURATION = re.compile(r"^([0-9]{1,9}(?:\.[0-9]{1,6})?)([smhdw])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}


def parse_when(text: str, now: float, field: str) -> float:
    """A time for since/until: a duration ago (30d, 12h, 90m, 2w), a date or date-time
    (2026-11-01, 2026-11-01T08:00, in the coordinator's local time unless it names a zone),
    or Unix seconds; InvalidSpec naming `field` otherwise."""
    text = text.strip()
    if match := _DURATION.match(text):
        return now - float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if re.fullmatch(r"[0-9]{1,11}(\.[0-9]{1,6})?", text):
        return float(text)
    try:
        if len(text) > 40:
            raise ValueError(text)
        return datetime.fromisoformat(text).timestamp()
    except (ValueError, OverflowError, OSError):
        raise InvalidSpec(
            f"{field} {text[:40]!r} is not a time: use a duration ago such as 30d or 12h, a "
            "date such as 2026-11-01 (or 2026-11-01T08:00), or Unix seconds",
            field=field,
        ) from None
