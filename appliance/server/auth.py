"""Bearer tokens: a file of hashed tokens mapped to users, groups and an admin flag.

The file (Settings.auth_tokens_file, YAML) is written by `appliance token create`; it holds only
SHA-256 digests, never a token, and tokens are never logged. Without the file, authentication
is off and every caller is an admin acting as the user it names.

    tokens:
      - user: alice
        groups: [nlp]
        admin: false
        sha256: 9f86d08...
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml

from appliance.domain.auth import ANONYMOUS_USER, Principal
from appliance.domain.errors import Unauthenticated

log = logging.getLogger(__name__)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


RELOAD_CHECK_SECONDS = 1.0


class Authenticator:
    """Who holds which token. Built from the tokens file, it follows the file: a change is
    picked up within RELOAD_CHECK_SECONDS of the next call (and at once on `reload`, which the
    coordinator calls on SIGHUP), so a removed token stops working without a restart."""

    def __init__(
        self,
        principals: dict[str, Principal] | None = None,
        path: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`principals` maps token digests to principals; None turns authentication off.
        With `path`, they are what that file says and follow it."""
        self._principals = principals
        self._path = path
        self._clock = clock
        self._seen: tuple[int, int, int] | None = _stamp(path) if path else None
        self._checked = clock()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self._principals is not None

    @classmethod
    def from_file(cls, path: Path | None) -> Authenticator:
        if path is None:
            return cls(None)
        try:
            return cls(_read(path), path)
        except ValueError as exc:
            raise SystemExit(str(exc)) from None

    def reload(self) -> None:
        """Read the tokens file again. A file that cannot be read refuses every token until
        it can (a revoked token must not live on because the new file has a typo)."""
        if self._path is None:
            return
        with self._lock:
            self._seen = _stamp(self._path)
            self._checked = self._clock()
            try:
                self._principals = _read(self._path)
            except ValueError as exc:
                log.error("%s; refusing every token until it can be read", exc)
                self._principals = {}

    def _follow(self) -> None:
        if self._path is None or self._clock() - self._checked < RELOAD_CHECK_SECONDS:
            return
        self._checked = self._clock()
        if _stamp(self._path) != self._seen:
            self.reload()

    def caller(self, authorization: str | None) -> Principal | None:
        """The authenticated caller, or None when authentication is off."""
        return self.principal(authorization) if self.enabled else None

    def principal(self, authorization: str | None, claimed_user: str = "") -> Principal:
        """Who calls, from an `Authorization: Bearer <token>` value."""
        self._follow()
        if self._principals is None:
            return Principal(user=claimed_user or ANONYMOUS_USER, admin=True)
        token = bearer_token(authorization)
        if token is None:
            raise Unauthenticated(
                "authentication is required: pass a token (csctl --token, CSCTL_TOKEN, or "
                "ApplianceClient(token=...))"
            )
        wanted = digest(token)
        for known, principal in self._principals.items():
            if hmac.compare_digest(known, wanted):
                return principal
        raise Unauthenticated("the token is not recognised; ask an admin for a valid one")


def _read(path: Path) -> dict[str, Principal]:
    """The principals of a tokens file by token digest; ValueError saying what is wrong."""
    try:
        entries = (yaml.safe_load(path.read_text()) or {}).get("tokens") or []
        return {
            str(e["sha256"]): Principal(
                user=str(e["user"]),
                groups=tuple(str(g) for g in e.get("groups") or ()),
                admin=bool(e.get("admin", False)),
            )
            for e in entries
        }
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"cannot read the tokens file {path}: {exc}") from None


def _stamp(path: Path) -> tuple[int, int, int]:
    """What changes when the file is rewritten or replaced: inode, size, mtime (ns)."""
    try:
        found = path.stat()
    except OSError:
        return (0, 0, 0)
    return (found.st_ino, found.st_size, found.st_mtime_ns)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` value; None if there is none."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def create_token(path: Path, user: str, groups: Sequence[str], admin: bool) -> str:
    """Add a new token for `user` to the tokens file (created 0600) and return it."""
    token = secrets.token_urlsafe(32)
    data = yaml.safe_load(path.read_text()) if path.exists() else None
    entries = list((data or {}).get("tokens") or [])
    entries.append({"user": user, "groups": list(groups), "admin": admin, "sha256": digest(token)})
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written whole under another name, then renamed over the file: a coordinator following
    # the file never reads it half-written.
    partial = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump({"tokens": entries}, f, sort_keys=False)
    os.replace(partial, path)
    return token
