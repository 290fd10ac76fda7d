"""One way to show a moment: RFC 3339 in UTC to the second (`2026-01-02T03:04:05Z`), and
nothing (null) for a moment that has not happened.

The store, the gRPC API and the Python client's objects keep Unix seconds (0.0: not yet);
what a person or a program reads as text (REST, `csctl -o json|yaml`) goes through here, so
every door writes the same string for the same moment.
"""

from __future__ import annotations

import datetime


def utc_moment(unix_seconds: float) -> datetime.datetime | None:
    """`unix_seconds` as an aware UTC datetime, to the second; None for 0 (not happened)."""
    if not unix_seconds:
        return None
    moment = datetime.datetime.fromtimestamp(unix_seconds, tz=datetime.UTC)
    return moment.replace(microsecond=0)


def rfc3339(unix_seconds: float) -> str | None:
    """`2026-01-02T03:04:05Z`; None for 0 (not happened)."""
    moment = utc_moment(unix_seconds)
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")
