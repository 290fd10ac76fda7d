"""The audit log's use case (domain/audit.py): the doors record, admins read.

A door's call never waits on the log: `record` puts the event on a bounded queue in memory and
returns; `run` (a task of the coordinator) writes what is queued in one transaction per batch,
then as JSON lines to the sink when one is set, and prunes rows past the retention once an
hour. A write that fails is logged and its events dropped, never raised into a call. A queue
that fills (a store that cannot keep up) drops the newest events and says how many.

Refusals by a per-user limit (the request rate, the streams cap: `record_limited`) are
coalesced, as log rate limiting is: the first refusal of a user by a limit at a door is
recorded in full, the same refusals in the next COALESCE_SECONDS are counted, and one record
(verb `limit-exceeded`, object `limit/<name>`) says how many there were when the window ends.
So a user sending thousands of refused calls a second leaves at most two records a second per
limit and door, and the writer's cost stays as small.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import logging
import os
import sys
import uuid
from collections.abc import Sequence
from typing import IO, Any

from appliance.config.groups import AuditSettings
from appliance.domain.audit import REQUEST_ID, AuditEvent, AuditLevel, AuditQuery
from appliance.domain.auth import Principal
from appliance.domain.errors import PermissionDenied
from appliance.services.context import Context

log = logging.getLogger(__name__)

BATCH = 500  # events one transaction writes at most
MAX_PENDING = 20_000  # events waiting for the writer at most; beyond, dropped (and counted)
PRUNE_INTERVAL = 3600.0  # seconds between two retention passes
# How long the writer lets events gather before a transaction that is not full (as the
# Kubernetes audit backend's batch-max-wait): a burst of 1,000 submits costs a few
# transactions, not one per wake-up. Readers of the log see an event this much later at most.
BATCH_WAIT = 0.1
DAY = 86_400.0
STDOUT = "-"
COALESCE_SECONDS = 1.0  # a limit's refusals of one user at one door: one record, then a count
MAX_WINDOWS = 10_000  # (user, limit, door) counted at once at most; beyond, dropped (counted)
LIMIT_VERB = "limit-exceeded"


@dataclasses.dataclass
class _Window:
    """The refusals of one user by one limit at one door since `start`: the first, recorded,
    and how many more came."""

    start: float
    first: AuditEvent
    limit: str
    more: int = 0


def request_id(sent: str | None) -> str:
    """A call's request id: the caller's when it sent a plain one, else a new one."""
    if sent and REQUEST_ID.fullmatch(sent):
        return sent
    return uuid.uuid4().hex


def open_sink(path: str | None) -> IO[str] | None:
    """The JSON-lines copy: None, stdout for "-", else `path` appended to (made 0600, never
    through a link). OSError when it cannot be opened."""
    if path is None or path == "":
        return None
    if path == STDOUT:
        return sys.stdout
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.fdopen(os.open(path, flags, 0o600), "a", encoding="utf-8")


class AuditTrail:
    """What the doors record and admins read. One per coordinator (composition/root.py)."""

    def __init__(self, ctx: Context, settings: AuditSettings, sink: IO[str] | None = None) -> None:
        self._ctx = ctx
        self.level = settings.level
        self._retention = settings.retention_days * DAY
        self._sink = sink
        self._pending: collections.deque[AuditEvent] = collections.deque()
        self._dropped = 0
        self._wake = asyncio.Event()
        self._full = asyncio.Event()
        self._writing = asyncio.Lock()
        self._windows: dict[tuple[str, str, str], _Window] = {}

    @property
    def on(self) -> bool:
        return self.level is not AuditLevel.NONE

    @property
    def wants_body(self) -> bool:
        """Whether a door should give each event its body's digest and size."""
        return self.level is AuditLevel.REQUEST

    def record(self, event: AuditEvent) -> None:
        """Queue `event` (stamped now when its `at` is 0) for the writer; never blocks, never
        raises. Called on the event loop."""
        if not self.on:
            return
        if len(self._pending) >= MAX_PENDING:
            self._dropped += 1
            return
        stamped: dict[str, Any] = {} if event.at else {"at": self._ctx.clock()}
        if not self.wants_body:
            stamped |= {"body_sha256": "", "body_bytes": -1}
        self._pending.append(event.bounded(**stamped))
        self._wake.set()
        if len(self._pending) >= BATCH:
            self._full.set()

    def record_limited(self, event: AuditEvent, limit: str) -> None:
        """Record `event`, a refusal by the per-user limit `limit`, coalesced: the first of its
        user, limit and door in COALESCE_SECONDS is queued, the others only counted."""
        if not self.on:
            return
        now = self._ctx.clock()
        key = (event.user, limit, event.door.value)
        window = self._windows.get(key)
        if window is not None and now - window.start < COALESCE_SECONDS:
            window.more += 1
            return
        if window is not None:
            self._summarise(self._windows.pop(key))
        elif len(self._windows) >= MAX_WINDOWS:
            self._close_windows(now)
            if len(self._windows) >= MAX_WINDOWS:
                self._dropped += 1
                return
        self._windows[key] = _Window(now, event, limit)
        self.record(event)

    def _close_windows(self, now: float | None) -> None:
        """Record how many refusals each window counted once it ended (`now` None: all)."""
        for key, window in list(self._windows.items()):
            if now is None or now - window.start >= COALESCE_SECONDS:
                self._summarise(self._windows.pop(key))

    def _summarise(self, window: _Window) -> None:
        if not window.more:
            return
        first = window.first
        reason = (
            f"{window.more} more call(s) of {first.user or 'an unknown caller'} refused by the "
            f"{window.limit} limit within {COALESCE_SECONDS:g} s of the one recorded "
            f"(request {first.request_id}); coalesced"
        )
        self.record(
            dataclasses.replace(
                first, at=0.0, request_id=request_id(None), verb=LIMIT_VERB,
                object_kind="limit", object_name=window.limit, reason=reason,
                body_sha256="", body_bytes=-1,
            )
        )  # fmt: skip

    async def run(self) -> None:
        """Write what is recorded as it comes, and prune by age once an hour (first at once)."""
        loop = asyncio.get_running_loop()
        next_prune = loop.time()
        while True:
            if loop.time() >= next_prune:
                await self.prune()
                next_prune = loop.time() + PRUNE_INTERVAL
            self._close_windows(self._ctx.clock())
            wait = max(next_prune - loop.time(), 0.0)
            if self._windows:  # a window's count is written when it ends
                wait = min(wait, COALESCE_SECONDS)
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except TimeoutError:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._full.wait(), BATCH_WAIT)
            await self.flush()

    async def flush(self, final: bool = False) -> None:
        """Write every event queued so far (in batches); on the way out (`final`), with the
        counts of the limits' windows not yet ended."""
        self._close_windows(None if final else self._ctx.clock())
        async with self._writing:
            self._wake.clear()
            self._full.clear()
            while self._pending:
                batch = [self._pending.popleft() for _ in range(min(BATCH, len(self._pending)))]
                try:
                    await self._ctx.db(self._write, batch)
                except Exception as exc:  # never into a call: said, and the batch dropped
                    log.error("audit: %d record(s) not written: %s", len(batch), exc)
            if self._dropped:
                log.error("audit: %d record(s) dropped: the writer fell behind", self._dropped)
                self._dropped = 0

    def _write(self, events: Sequence[AuditEvent]) -> None:
        """On the store's thread: the rows in one transaction, then the sink's lines."""
        self._ctx.store.append_audit_events(events)
        if self._sink is None:
            return
        try:
            self._sink.write("".join(json.dumps(e.document()) + "\n" for e in events))
            self._sink.flush()
        except (OSError, ValueError) as exc:
            log.error("audit: %d record(s) not written to the sink: %s", len(events), exc)

    async def prune(self) -> int:
        """Delete the rows older than the retention (0 days: none); how many went."""
        if not self._retention:
            return 0
        before = self._ctx.clock() - self._retention
        gone = 0
        try:
            while True:
                pruned = await self._ctx.db(self._ctx.store.prune_audit_events, before)
                gone += pruned
                if not pruned:
                    break
        except Exception as exc:
            log.error("audit: pruning failed: %s", exc)
        if gone:
            log.info("audit: pruned %d record(s) older than the retention", gone)
        return gone

    async def list(self, query: AuditQuery, by: Principal | None) -> list[AuditEvent]:
        """The events `query` selects, newest first: admins only (`by` None: authentication
        is off, and every caller is an admin)."""
        if by is not None and not by.admin:
            raise PermissionDenied("only admins may read the audit log")
        return await self._ctx.read(self._ctx.store.audit_events, query.checked())

    def close(self) -> None:
        if self._sink is not None and self._sink is not sys.stdout:
            self._sink.close()
