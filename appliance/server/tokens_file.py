"""The tokens file: what `appliance token create/list/revoke/rotate` write and the coordinator
reads (server/auth.py). It holds SHA-256 digests only, never a token.

    tokens:
      - id: 3fa2b1c9            # random, not derived from the token; what list/revoke show
        user: alice
        groups: [nlp]
        admin: false
        created: '2026-11-29T01:32:07Z'
        expires: '2027-02-27T01:32:07Z'   # absent or null: never
        sha256: 9f86d08...

Entries written before ids and expiry existed keep working: such an entry never expires, and
its id is the first 8 characters of its digest (stable, and written back as that id the next
time the file is written; 32 bits of a digest of a 256-bit random token give nothing away).

Every write is whole: a new file (0600) under another name, renamed over the old one, so a
coordinator following the file never reads it half-written.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from appliance.domain.auth import Principal

MAX_TTL_SECONDS = 3650 * 86400.0  # ten years; longer is `never`, said on purpose
DEFAULT_TTL = "90d"
_TTL = re.compile(r"([0-9]{1,7})([smhd])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_ID = re.compile(r"[0-9a-f]{8}")
_MAX_FILE_BYTES = 16 * 1024 * 1024


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class TokenEntry:
    """One token of the file: who it acts as, when it was made and when it stops working
    (None: never). Times are Unix seconds."""

    id: str
    principal: Principal
    sha256: str
    created: float | None = None
    expires: float | None = None

    def expired(self, now: float) -> bool:
        return self.expires is not None and now >= self.expires


def parse_ttl(text: str) -> float | None:
    """Seconds from `30m`, `12h`, `90d` (or `45s`); None for `0` or `never`. ValueError, one
    line (without the option's name), for anything else or over ten years."""
    if text.lower() in ("0", "never"):
        return None
    matched = _TTL.fullmatch(text.lower()) if len(text) <= 16 else None
    if matched is None:
        raise ValueError(
            f"{text[:20]!r} is not a duration: give a number and a unit (30m, 12h, 90d), "
            "or 0 / never for a token that does not expire"
        )
    seconds = float(int(matched[1]) * _UNIT_SECONDS[matched[2]])
    if seconds > MAX_TTL_SECONDS:
        raise ValueError(
            f"{text!r} is over ten years (3650d); use `never` if that is what you mean"
        )
    return seconds


def iso(seconds: float) -> str:
    """A Unix time as UTC ISO 8601 to the second: 2026-11-29T01:32:07Z."""
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_entries(path: Path) -> list[TokenEntry]:
    """The entries of the tokens file at `path`; ValueError saying what is wrong."""
    try:
        if path.stat().st_size > _MAX_FILE_BYTES:
            raise ValueError(f"larger than {_MAX_FILE_BYTES} bytes")
        data = yaml.safe_load(path.read_text()) or {}
        return [_entry(e) for e in data.get("tokens") or []]
    except (OSError, ValueError, yaml.YAMLError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"cannot read the tokens file {path}: {exc}") from None


def _entry(raw: dict[str, Any]) -> TokenEntry:
    sha256 = str(raw["sha256"])
    entry_id = str(raw.get("id") or sha256[:8])
    if not _ID.fullmatch(entry_id):
        raise ValueError(f"the id {entry_id[:20]!r} is not 8 hexadecimal characters")
    principal = Principal(
        user=str(raw["user"]),
        groups=tuple(str(g) for g in raw.get("groups") or ()),
        admin=bool(raw.get("admin", False)),
    )
    return TokenEntry(entry_id, principal, sha256, _time(raw, "created"), _time(raw, "expires"))


def _time(raw: dict[str, Any], key: str) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, str):  # what we write; YAML may also hand back a datetime
        value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if not isinstance(value, dt.datetime):
        raise ValueError(f"{key} is not a time: {str(value)[:40]!r}")
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.timestamp()


def _read_or_empty(path: Path) -> list[TokenEntry]:
    return read_entries(path) if path.exists() else []


def write_entries(path: Path, entries: Sequence[TokenEntry]) -> None:
    """Replace the tokens file with `entries`, atomically and 0600."""
    rows = [
        {
            "id": e.id,
            "user": e.principal.user,
            "groups": list(e.principal.groups),
            "admin": e.principal.admin,
            "created": None if e.created is None else iso(e.created),
            "expires": None if e.expires is None else iso(e.expires),
            "sha256": e.sha256,
        }
        for e in entries
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump({"tokens": rows}, f, sort_keys=False)
    os.replace(partial, path)


def _new_id(entries: Sequence[TokenEntry]) -> str:
    taken = {e.id for e in entries}
    while (found := secrets.token_hex(4)) in taken:
        pass
    return found


def create_token(
    path: Path,
    user: str,
    groups: Sequence[str],
    admin: bool,
    ttl: float | None = None,
    now: float | None = None,
) -> str:
    """Add a new token for `user` to the tokens file (created 0600), valid for `ttl` seconds
    (None: no expiry), and return it."""
    return add_token(path, Principal(user, tuple(groups), admin), ttl, now)[0]


def add_token(
    path: Path, principal: Principal, ttl: float | None, now: float | None = None
) -> tuple[str, TokenEntry]:
    """A new token for `principal`, valid for `ttl` seconds (None: no expiry), and its entry."""
    now = time.time() if now is None else now
    entries = _read_or_empty(path)
    token, entry = _fresh(entries, principal, ttl, now)
    write_entries(path, [*entries, entry])
    return token, entry


def _fresh(
    entries: Sequence[TokenEntry], principal: Principal, ttl: float | None, now: float
) -> tuple[str, TokenEntry]:
    token = secrets.token_urlsafe(32)
    now = float(int(now))  # the file keeps whole seconds: the entry says what it will read
    expires = None if ttl is None else float(int(now + ttl))
    return token, TokenEntry(_new_id(entries), principal, digest(token), now, expires)


def revoke_token(path: Path, entry_id: str) -> TokenEntry:
    """Remove the token `entry_id` from the file; LookupError (one line) if there is none."""
    entries = _read_or_empty(path)
    found = find_entry(path, entries, entry_id)
    write_entries(path, [e for e in entries if e is not found])
    return found


def rotate_token(
    path: Path, entry_id: str, ttl: float | None, overlap: float, now: float | None = None
) -> tuple[str, TokenEntry]:
    """A new token for the principal of `entry_id`, valid for `ttl`; the old one is removed
    (`overlap` 0) or expires `overlap` seconds from now (never later than it would have)."""
    now = time.time() if now is None else now
    entries = _read_or_empty(path)
    old = find_entry(path, entries, entry_id)
    token, new = _fresh(entries, old.principal, ttl, now)
    kept: list[TokenEntry] = []
    for e in entries:
        if e is not old:
            kept.append(e)
        elif overlap > 0:
            ends = float(int(now + overlap))
            ends = ends if e.expires is None else min(e.expires, ends)
            kept.append(replace(e, expires=ends))
    write_entries(path, [*kept, new])
    return token, new


def find_entry(path: Path, entries: Sequence[TokenEntry], entry_id: str) -> TokenEntry:
    """The entry `entry_id` of `entries` (read from `path`); LookupError, one line, if none."""
    for entry in entries:
        if entry.id == entry_id:
            return entry
    shown = entry_id[:20]
    raise LookupError(f"no token with id {shown!r} in {path} (`appliance token list` shows them)")
