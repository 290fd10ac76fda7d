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

from appliance.domain.errors import InvalidSpec

MAX_WINDOW_SECONDS = 10 * 366 * 86_400.0
DEFAULT_WINDOW_SECONDS = 30 * 86_400.0


class UsageBy(enum.StrEnum):
    USER = "user"
    GROUP = "group"
    QUEUE = "queue"

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


def usage_query(since: float, until: float, by: str, now: float) -> UsageQuery:
    """The window asked for, checked: `until` 0 is now, `since` 0 is 30 days before it."""
    for name, value in (("since", since), ("until", until)):
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or value != value or not 0 <= value < 1e11:
            raise InvalidSpec(f"{name} must be a Unix time, got {value!r}", field=name)
    until = until or now
    since = since or until - DEFAULT_WINDOW_SECONDS
    if since >= until:
        raise InvalidSpec("since must be before until", field="since")
    if until - since > MAX_WINDOW_SECONDS:
        raise InvalidSpec("the window may be at most 10 years long", field="since")
    return UsageQuery(float(since), float(until), UsageBy.parse(by))
