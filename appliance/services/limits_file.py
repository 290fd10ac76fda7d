"""The limits file (APPLIANCE_LIMITS_FILE), followed as the tokens file is (server/auth.py): a
change is picked up within RELOAD_CHECK_SECONDS of the next look, without a restart.

A file that cannot be read at start stops the start with one line naming the field; one that
becomes unreadable later keeps the last policy read (logged): a typo made while raising a cap
must not lift every cap.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from appliance.domain.errors import InvalidSpec
from appliance.domain.limits import LimitsPolicy
from appliance.domain.limits_document import MAX_FILE_BYTES, parse_limits

log = logging.getLogger(__name__)

RELOAD_CHECK_SECONDS = 1.0


class LimitsFileError(Exception):
    """The limits file cannot be used; the message names the file and the field."""


class LimitsFile:
    """The policy in force: the file's (None: the built-in defaults), on or off as `enabled`
    says (the file's own `enabled: false` turns them off too)."""

    def __init__(
        self,
        path: Path | None,
        *,
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._path = path
        self._enabled = enabled
        self._clock = clock
        self._seen = _stamp(path) if path else None
        self._checked = clock()
        self._policy = self._read() if path else LimitsPolicy(enabled=enabled)

    @property
    def path(self) -> Path | None:
        return self._path

    def policy(self) -> LimitsPolicy:
        """The policy, read again when the file changed since the last look."""
        if self._path is not None and self._clock() - self._checked >= RELOAD_CHECK_SECONDS:
            self._checked = self._clock()
            if _stamp(self._path) != self._seen:
                self.reload()
        return self._policy

    def reload(self) -> None:
        if self._path is None:
            return
        self._seen = _stamp(self._path)
        try:
            self._policy = self._read()
        except LimitsFileError as exc:
            log.error("%s; keeping the limits read before", exc)

    def _read(self) -> LimitsPolicy:
        assert self._path is not None
        where = f"the limits file {self._path}"
        try:
            with self._path.open("rb") as f:
                raw = f.read(MAX_FILE_BYTES + 1)
            policy = parse_limits(raw.decode(), where)
        except OSError as exc:
            raise LimitsFileError(f"cannot read {where}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise LimitsFileError(f"{where} is not UTF-8 text") from None
        except InvalidSpec as exc:
            raise LimitsFileError(exc.message) from None
        if not self._enabled:
            return LimitsPolicy(enabled=False)
        return policy


def _stamp(path: Path) -> tuple[int, int, int]:
    try:
        found = path.stat()
    except OSError:
        return (0, 0, 0)
    return (found.st_ino, found.st_size, found.st_mtime_ns)
