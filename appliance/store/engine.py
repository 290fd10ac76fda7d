"""Engine construction, schema migration (Alembic, applied on start), and the claim one
coordinator lays on a SQLite store."""

from __future__ import annotations

import fcntl
import os
import secrets
from pathlib import Path
from typing import IO, Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event

MIGRATIONS = Path(__file__).parent / "migrations"


# What this process's PostgreSQL sessions are called (application_name): a leader records it
# on taking office, and the next leader ends the sessions so named (store/leadership.py).
SESSION_NAME = f"appliance-{os.getpid()}-{secrets.token_hex(6)}"


def make_engine(url: str, *, session_name: str = SESSION_NAME) -> Engine:
    """An engine for any SQLAlchemy URL; SQLite gets WAL, foreign keys and a busy timeout;
    PostgreSQL sessions carry `session_name` as their application_name."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    return create_engine(
        url,
        pool_pre_ping=True,
        pool_size=10,
        max_overflow=10,
        connect_args={"application_name": session_name},
    )


def alembic_config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = engine
    return cfg


# Two coordinators starting together on one PostgreSQL database migrate one after the other.
MIGRATION_LOCK = 0x6170706C  # "appl"


class StoreInUse(Exception):
    """Another coordinator uses this SQLite store; the message says what to do."""


def claim_sqlite(engine: Engine) -> IO[str] | None:
    """For a SQLite store: an exclusive lock (flock, released when the process ends, even by
    SIGKILL) on `<database>.coordinator`, held until the returned file is closed. None for
    other databases. Raises StoreInUse when another coordinator holds it: SQLite has one
    writer and no leader election, so two coordinators would both schedule."""
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        return None
    path = Path(f"{database}.coordinator")
    claim = path.open("a+")
    try:
        fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        claim.seek(0)
        holder = claim.read().strip() or "unknown"
        claim.close()
        raise StoreInUse(
            f"another coordinator (pid {holder}) uses the SQLite store {database}; SQLite "
            "allows one coordinator: stop that one, or use PostgreSQL "
            "(APPLIANCE_DATABASE_URL) to run two"
        ) from None
    claim.truncate(0)
    claim.write(f"{os.getpid()}\n")
    claim.flush()
    return claim


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest revision (idempotent), then refresh planner statistics.

    SQLite's planner picks the partial indexes (active view, queue order) only with statistics;
    a bounded ANALYZE keeps this to a fraction of a second on large stores. On PostgreSQL an
    advisory lock makes coordinators starting together migrate one at a time.
    """
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.exec_driver_sql(f"SELECT pg_advisory_lock({MIGRATION_LOCK})")
            try:
                command.upgrade(alembic_config(engine), "head")
            finally:
                conn.exec_driver_sql(f"SELECT pg_advisory_unlock({MIGRATION_LOCK})")
                conn.commit()
        return
    command.upgrade(alembic_config(engine), "head")
    if engine.dialect.name == "sqlite":
        with engine.begin() as conn:
            conn.exec_driver_sql("PRAGMA analysis_limit=1000")
            conn.exec_driver_sql("ANALYZE")
