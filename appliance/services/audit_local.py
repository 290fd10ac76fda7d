"""The audit log of changes made on the coordinator's host rather than through its doors:
`appliance token create/revoke/rotate` edit the tokens file directly (#36), and each change is
one record (door `cli`, source `local`, the OS user who ran it) appended to the same store's
table and JSON-lines file as the coordinator's own records, never a token.

A command opens the log before it changes anything (`LocalAudit.open`), so a store that
exists but cannot be written refuses the change rather than let it go unrecorded (the command
says how to make it anyway, knowingly). A data dir with no store yet (the first token is made
before the coordinator first starts) has no log to write to: the change is made, said so. A
stdout sink ("-") is the coordinator's stream, not a command's: only a file is written here.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import IO

from sqlalchemy import inspect
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from appliance.config.groups import AuditSettings, StoreSettings
from appliance.domain.audit import AuditEvent, AuditLevel
from appliance.services.audit import STDOUT, open_sink
from appliance.store.engine import make_engine
from appliance.store.jobs import JobStore

_TABLE = "audit_events"


class AuditUnavailable(Exception):
    """The audit log cannot be written: one line saying why."""


class NoStoreYet(AuditUnavailable):
    """There is no store where the settings point (a coordinator never ran with them)."""


@dataclasses.dataclass
class LocalAudit:
    """An open audit log: `record` appends one event (store, then file)."""

    level: AuditLevel
    engine: Engine | None
    sink: IO[str] | None

    @classmethod
    def open(cls, store: StoreSettings, audit: AuditSettings) -> LocalAudit:
        """The log the settings name; AuditUnavailable (NoStoreYet when the store was never
        made) when it cannot be written. Level None: a log that records nothing."""
        if audit.level is AuditLevel.NONE:
            return cls(audit.level, None, None)
        sink = None
        if audit.file and audit.file != STDOUT:
            try:
                sink = open_sink(audit.file)
            except OSError as exc:
                raise AuditUnavailable(f"cannot open the audit file {audit.file}: {exc}") from None
        try:
            return cls(audit.level, _engine(store), sink)
        except AuditUnavailable:
            if sink is not None:
                sink.close()
            raise

    def record(self, event: AuditEvent) -> None:
        """Append `event` (stamped now); AuditUnavailable when it could not be written."""
        if self.level is AuditLevel.NONE:
            return
        event = event.bounded(at=event.at or time.time(), body_sha256="", body_bytes=-1)
        if self.engine is not None:
            try:
                JobStore(self.engine).append_audit_events([event])
            except SQLAlchemyError as exc:
                raise AuditUnavailable(f"the audit log: {_first_line(exc)}") from None
        if self.sink is not None:
            try:
                self.sink.write(json.dumps(event.document()) + "\n")
                self.sink.flush()
            except OSError as exc:
                raise AuditUnavailable(f"the audit file: {exc}") from None

    def close(self) -> None:
        if self.engine is not None:
            self.engine.dispose()
        if self.sink is not None:
            self.sink.close()


def _engine(store: StoreSettings) -> Engine:
    """The store's engine, checked to hold the audit table (never a new SQLite file made)."""
    if not store.is_postgres:
        database = Path(store.url.removeprefix("sqlite:///"))
        if not database.is_file():
            raise NoStoreYet(f"there is no store at {database} (a coordinator never ran there)")
    engine = make_engine(store.url)
    try:
        with engine.connect() as conn:
            found = inspect(conn).has_table(_TABLE)
    except SQLAlchemyError as exc:
        engine.dispose()
        raise AuditUnavailable(f"cannot open the store: {_first_line(exc)}") from None
    if not found:
        engine.dispose()
        raise AuditUnavailable(
            f"the store {engine.url!r} has no audit log yet: run `appliance migrate`"
        )
    return engine


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
