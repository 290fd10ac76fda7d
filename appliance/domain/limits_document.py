"""The limits file an admin writes (APPLIANCE_LIMITS_FILE), read into a LimitsPolicy. Every
value is bounded and checked, and a refusal is one line naming the field:

    enabled: true              # false: no per-user limits at all
    defaults:                  # every user; a field left out keeps the built-in default
      streams: 128             # concurrent watches, followed logs, event streams, feeds
      requests_per_second: 50  # the token bucket's refill ...
      burst: 200               # ... and its size
      queued_jobs: 256         # jobs waiting to run (not yet RUNNING)
      running_systems: unlimited  # CS-2 systems a user's admitted jobs hold at once
    groups:                    # a user gets the most generous of their groups' values
      nlp: {queued_jobs: 512}
    users:                     # a user's own values come first
      alice: {streams: unlimited}
    queues:                    # jobs one user may have waiting in that queue
      small: {queued_jobs_per_user: 16}
"""

from __future__ import annotations

import re
from typing import Any

from appliance.domain.bounded_yaml import load_bounded
from appliance.domain.errors import InvalidSpec
from appliance.domain.limits import CAP_FIELDS, Caps, LimitsPolicy, Override
from appliance.domain.spec import validate_user

MAX_FILE_BYTES = 1 << 20
MAX_ENTRIES = 10_000
UNLIMITED = "unlimited"
_TOP = frozenset({"enabled", "defaults", "groups", "users", "queues"})
_NAME_RE = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_.@]{0,252}$")
# The largest value each cap takes; ints but requests_per_second, which may be a fraction.
_BOUNDS: dict[str, float] = {
    "streams": 100_000,
    "requests_per_second": 1_000_000,
    "burst": 1_000_000,
    "queued_jobs": 10_000_000,
    "running_systems": 100_000,
}
_NOT_UNLIMITED = frozenset({"burst"})


def parse_limits(text: str, where: str = "the limits file") -> LimitsPolicy:
    """The policy `text` says; InvalidSpec naming the field for anything out of bounds."""
    if len(text.encode()) > MAX_FILE_BYTES:
        raise InvalidSpec(f"{where} is larger than {MAX_FILE_BYTES} bytes", field="limits")
    data = load_bounded(text, "limits") or {}
    document = _mapping(data, "limits", where)
    for key in document:
        if key not in _TOP:
            raise _refused(where, str(key), f"is not a field (use {', '.join(sorted(_TOP))})")
    enabled = document.get("enabled", True)
    if not isinstance(enabled, bool):
        raise _refused(where, "enabled", "must be true or false")
    defaults = _override(document.get("defaults"), "defaults", where)
    caps = Caps(**defaults.values)  # type: ignore[arg-type]
    return LimitsPolicy(
        defaults=caps,
        users=_named(document.get("users"), "users", where, user=True),
        groups=_named(document.get("groups"), "groups", where, user=False),
        queues=_queues(document.get("queues"), where),
        enabled=enabled,
    )


def _refused(where: str, field: str, what: str) -> InvalidSpec:
    return InvalidSpec(f"{where}: {field} {what}", field=field)


def _mapping(value: Any, field: str, where: str) -> dict[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _refused(where, field, "must be a mapping")
    if len(value) > MAX_ENTRIES:
        raise _refused(where, field, f"has more than {MAX_ENTRIES} entries")
    return value


def _named(value: Any, field: str, where: str, *, user: bool) -> dict[str, Override]:
    found: dict[str, Override] = {}
    for name, entry in _mapping(value, field, where).items():
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise _refused(where, f"{field}.{name}", "is not a user or group name")
        if user:
            try:
                validate_user(name)
            except InvalidSpec:
                raise _refused(where, f"{field}.{name}", "is not a user name") from None
        found[name] = _override(entry, f"{field}.{name}", where)
    return found


def _override(value: Any, field: str, where: str) -> Override:
    values: dict[str, int | float | None] = {}
    for key, given in _mapping(value, field, where).items():
        if key not in CAP_FIELDS:
            raise _refused(
                where, f"{field}.{key}", f"is not a limit (use {', '.join(CAP_FIELDS)})"
            )
        values[key] = _cap(given, f"{field}.{key}", key, where)
    return Override(values)


def _cap(value: Any, field: str, name: str, where: str) -> int | float | None:
    most = _BOUNDS[name]
    if value == UNLIMITED and name not in _NOT_UNLIMITED:
        return None
    fraction = name == "requests_per_second"
    kinds = "a number" if fraction else "a whole number"
    least = 1 if name == "burst" else 0
    allowed = isinstance(value, int | float) if fraction else isinstance(value, int)
    if (
        isinstance(value, bool)
        or not allowed
        or value != value  # NaN
        or not least <= value <= most
        or (fraction and value == 0)
    ):
        also = "" if name in _NOT_UNLIMITED else f" or {UNLIMITED}"
        above = "above 0" if fraction else f"from {least}"
        raise _refused(
            where, field, f"must be {kinds} {above} to {most:g}{also}, got {str(value)[:40]!r}"
        )
    return float(value) if fraction else int(value)


def _queues(value: Any, where: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for name, entry in _mapping(value, "queues", where).items():
        field = f"queues.{name}"
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise _refused(where, field, "is not a queue name")
        body = _mapping(entry, field, where)
        for key in body:
            if key != "queued_jobs_per_user":
                raise _refused(where, f"{field}.{key}", "is not a field (queued_jobs_per_user)")
        cap = _cap(body.get("queued_jobs_per_user"), f"{field}.queued_jobs_per_user",
                   "queued_jobs", where)  # fmt: skip
        if cap is not None:
            found[name] = int(cap)
    return found
