"""Elastic jobs: a range of CS-2 systems instead of one size (`--num_csx 2-8`).

A job's spec keeps `num_csx` as its most systems and `num_csx_min` as its fewest (0: a job of
exactly `num_csx`). Weight streaming keeps the global batch whatever the number of CS-2s that
share it, and checkpoints do not depend on it (workers/checkpoints.py), so a job may start,
resume and grow on any size in its range with the training result of a fixed-size job: which
size it runs on is the scheduler's choice (scheduler/admission.py: the most that fit;
scheduler/elastic.py: when a running job grows).
"""

from __future__ import annotations

import re

from appliance.domain.errors import InvalidSpec

_F = "num_csx"
MAX_RANGE_CHARS = 16  # "123456-123456": bounded before it is parsed
_RANGE = re.compile(r"^\s*(\d{1,6})\s*(?:-\s*(\d{1,6})\s*)?$")


def parse_csx_range(text: str | int) -> tuple[int, int]:
    """`8` or `"8"`: (8, 0), exactly 8 systems; `"2-8"`: (8, 2), from 2 to 8. Returns
    (num_csx, num_csx_min) as the spec holds them; InvalidSpec naming `num_csx` otherwise."""
    if isinstance(text, bool):
        raise InvalidSpec(f"num_csx must be a number or a range like 2-8, got {text}", field=_F)
    if isinstance(text, int):
        return text, 0
    if not isinstance(text, str) or len(text) > MAX_RANGE_CHARS:
        raise InvalidSpec("num_csx must be a number or a range like 2-8", field="num_csx")
    match = _RANGE.match(text)
    if match is None:
        raise InvalidSpec(
            f"num_csx {text!r} must be a number or a range like 2-8", field="num_csx"
        )
    low, high = match.group(1), match.group(2)
    if high is None:
        return int(low), 0
    if int(low) == 0:
        raise InvalidSpec(f"num_csx {text!r}: a range starts at 1 or more", field="num_csx")
    if int(low) > int(high):
        raise InvalidSpec(
            f"num_csx {text!r}: the fewest ({low}) is more than the most ({high})",
            field="num_csx_min",
        )
    return int(high), int(low) if int(low) < int(high) else 0


def checked_csx_min(num_csx_min: object, num_csx: int) -> int:
    """The spec's `num_csx_min`: 0 (fixed size) or 1..num_csx; the same as num_csx is a fixed
    size (0). InvalidSpec naming `num_csx_min` otherwise."""
    if isinstance(num_csx_min, bool) or not isinstance(num_csx_min, int):
        raise InvalidSpec(
            f"num_csx_min must be an integer, got {num_csx_min!r}", field="num_csx_min"
        )
    if not 0 <= num_csx_min <= num_csx:
        raise InvalidSpec(
            f"num_csx_min must be from 1 to num_csx ({num_csx}), or 0 for exactly num_csx; "
            f"got {num_csx_min}",
            field="num_csx_min",
        )
    return 0 if num_csx_min == num_csx else num_csx_min


def csx_range_text(num_csx: int, num_csx_min: int) -> str:
    """`2-8` for an elastic job, `8` for a fixed one."""
    return f"{num_csx_min}-{num_csx}" if num_csx_min else str(num_csx)


def size_text(current: int, num_csx: int, num_csx_min: int) -> str:
    """What `csctl get jobs` shows: `4 (2-8)` for an elastic job on 4 (`- (2-8)` while it holds
    none), `8` for a fixed one."""
    if not num_csx_min:
        return str(num_csx)
    return f"{current or '-'} ({csx_range_text(num_csx, num_csx_min)})"
