"""Every replica's log lines in the order they were written, as `csctl logs` prints them.

The coordinator sends a job's logs replica by replica, so `csctl logs ID | tail` showed the
last replica's lines (a MemoryX server's), not the chief's latest steps. The replicas stamp
each line they log (`2026-11-28 12:16:57,345 chief-0 INFO ...`); lines are merged on that
stamp, a line without one (a traceback's, a print's) keeping its place after the line before
it, and lines of the same moment keeping the coordinator's order of replicas.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable

# The stamp Python's logging puts first (asctime), or an ISO 8601 one.
_STAMP = re.compile(r"(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(?:[.,](\d{1,9}))?")

Line = tuple[str, str]  # (replica, line)


def interleaved(lines: Iterable[Line]) -> list[Line]:
    """`lines`, grouped by replica as the coordinator sends them, merged by time."""
    by_replica: dict[str, list[tuple[str, Line]]] = {}
    for replica, line in lines:
        own = by_replica.setdefault(replica, [])
        stamp = _stamp(line)
        if stamp is None:  # a continuation: the time of the line before it
            stamp = own[-1][0] if own else ""
        own.append((stamp, (replica, line)))
    merged = heapq.merge(*by_replica.values(), key=lambda item: item[0])
    return [line for _, line in merged]


def _stamp(line: str) -> str | None:
    """A sortable form of the line's leading time stamp, None when it has none."""
    found = _STAMP.match(line)
    if found is None:
        return None
    day, time, fraction = found.groups()
    return f"{day} {time}.{(fraction or '').ljust(9, '0')}"
