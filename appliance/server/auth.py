"""Bearer tokens: a file of hashed tokens mapped to users, groups and an admin flag, each with
an id and an optional expiry (the format: server/tokens_file.py).

The file (Settings.auth_tokens_file, YAML) is written by `appliance token create/revoke/rotate`;
it holds only SHA-256 digests, never a token, and tokens are never logged. Without the file,
authentication is off and every caller is an admin acting as the user it names.

A token is refused once it has expired (by the wall clock) or been removed from the file (seen
within RELOAD_CHECK_SECONDS); a stream re-checks its caller at least every
STREAM_RECHECK_SECONDS (server/streams.py), so either ends a stream within about a second.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from appliance.domain.auth import ANONYMOUS_USER, Principal
from appliance.domain.errors import Unauthenticated
from appliance.server.oidc import OidcVerifier, looks_like_jwt
from appliance.server.tokens_file import TokenEntry, iso, read_entries
from appliance.server.tokens_file import create_token as create_token
from appliance.server.tokens_file import digest as digest

log = logging.getLogger(__name__)

RELOAD_CHECK_SECONDS = 0.5
STREAM_RECHECK_SECONDS = 0.5


class Authenticator:
    """Who holds which token. Built from the tokens file, it follows the file: a change is
    picked up within RELOAD_CHECK_SECONDS of the next call (and at once on `reload`, which the
    coordinator calls on SIGHUP), so a removed token stops working without a restart."""

    def __init__(
        self,
        principals: dict[str, Principal] | None = None,
        path: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """`principals` maps token digests to principals (that never expire); None turns
        authentication off. With `path`, the tokens are what that file says and follow it.
        `clock` paces the re-reading, `wall` (Unix seconds) decides expiry."""
        self._principals: dict[str, TokenEntry] | None = None
        if principals is not None:
            self._principals = {d: TokenEntry(d[:8], p, d) for d, p in principals.items()}
        self._path = path
        self._clock = clock
        self._wall = wall
        self._oidc: OidcVerifier | None = None
        self._seen: tuple[int, int, int] | None = _stamp(path) if path else None
        self._checked = clock()
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self._principals is not None

    @classmethod
    def from_file(
        cls,
        path: Path | None,
        wall: Callable[[], float] = time.time,
        oidc: OidcVerifier | None = None,
    ) -> Authenticator:
        """What the tokens file at `path` says (None and no `oidc`: authentication off), and
        JWTs of an OIDC issuer when `oidc` is given; `wall` decides expiry (Unix seconds)."""
        if path is None and oidc is None:
            return cls(None)
        try:
            entries = {} if path is None else _read(path)
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
        auth = cls(None, path, wall=wall)
        auth._principals = entries
        auth._oidc = oidc
        return auth

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
        # A lookup by digest: what its timing could tell is about the SHA-256 of the token
        # sent, which says nothing of any valid token.
        entry = self._principals.get(digest(token))
        if entry is None and self._oidc is not None and looks_like_jwt(token):
            return self._oidc.principal(token, self._wall())
        if entry is None:
            raise Unauthenticated("the token is not recognised; ask an admin for a valid one")
        if entry.expired(self._wall()):
            raise Unauthenticated(
                f"the token {entry.id} expired at {iso(entry.expires or 0)}; ask an admin for "
                "a new one (appliance token rotate)"
            )
        return entry.principal


def _read(path: Path) -> dict[str, TokenEntry]:
    """The entries of a tokens file by token digest; ValueError saying what is wrong."""
    return {entry.sha256: entry for entry in read_entries(path)}


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
