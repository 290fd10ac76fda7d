"""Fair share: which queue goes first for idle capacity.

A queue's usage is what it held times for how long, in system-seconds and MemoryX
byte-seconds, with every second's contribution halved each half-life that passes after it
(APPLIANCE_FAIR_SHARE_HALF_LIFE_SECONDS): for a job holding `a` from `s` to `e`, at time `t`,

    usage = a * H / ln 2 * (2^(-(t - e) / H) - 2^(-(t - s) / H))

Its weighted share is its dominant resource's part of the pool's capacity, over its weight:

    share = max(systems_usage / pool_systems, memoryx_usage / pool_memoryx_bytes) / weight

The queue with the lowest share borrows idle capacity first, so over a long run each queue
gets system-time in proportion to its weight (Slurm's fair-share and Kueue's fair sharing use
the same ideas: decayed usage over shares, and the dominant resource).
"""

from __future__ import annotations

import dataclasses
import math

LN2 = math.log(2)


@dataclasses.dataclass(frozen=True)
class Usage:
    """Decayed usage at `as_of`: system-seconds and MemoryX byte-seconds."""

    system_seconds: float = 0.0
    memoryx_byte_seconds: float = 0.0
    as_of: float = 0.0

    def at(self, now: float, half_life: float) -> Usage:
        """The same usage seen at `now` (decayed further; never un-decayed)."""
        if now <= self.as_of:
            return self
        factor = decay(now - self.as_of, half_life)
        return Usage(self.system_seconds * factor, self.memoryx_byte_seconds * factor, now)

    def plus(self, other: Usage, half_life: float) -> Usage:
        """Both added up at the later of their times."""
        now = max(self.as_of, other.as_of)
        a, b = self.at(now, half_life), other.at(now, half_life)
        return Usage(
            a.system_seconds + b.system_seconds,
            a.memoryx_byte_seconds + b.memoryx_byte_seconds,
            now,
        )


def decay(elapsed: float, half_life: float) -> float:
    return float(2.0 ** (-max(0.0, elapsed) / half_life))


def held(
    systems: int, memoryx_bytes: int, start: float, end: float, now: float, half_life: float
) -> Usage:
    """The decayed usage at `now` of holding that much from `start` to `end`."""
    end = min(end, now)
    if end <= start:
        return Usage(0.0, 0.0, now)
    seconds = half_life / LN2 * (decay(now - end, half_life) - decay(now - start, half_life))
    return Usage(systems * seconds, memoryx_bytes * seconds, now)


def weighted_share(
    usage: Usage, pool_systems: int, pool_memoryx_bytes: int, weight: float
) -> float:
    systems = usage.system_seconds / pool_systems if pool_systems else 0.0
    memoryx = usage.memoryx_byte_seconds / pool_memoryx_bytes if pool_memoryx_bytes else 0.0
    return max(systems, memoryx) / weight
