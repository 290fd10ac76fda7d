"""What every part of the store shares: the engine, sessions, and plain driver reads."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import sessionmaker

from appliance.store.fence import Fence

IN_LIST_SIZE = 500  # SQLite and PostgreSQL both cap bound parameters per statement


class StoreBase:
    """The engine and a session factory; the parts of JobStore (store/pool.py, queue.py,
    listing.py, jobs.py) each add the reads and writes of their concern."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        # Checked by every phase write (store/fence.py); the composition root arms it when
        # coordinators elect a leader.
        self.fence = Fence()

    def _driver_rows(self, stmt: Any) -> list[Any]:
        """Run a select of plain columns (no type conversions) and return the driver's tuples."""
        compiled = stmt.compile(
            dialect=self.engine.dialect, compile_kwargs={"render_postcompile": True}
        )
        params = compiled.construct_params()
        args: Any = params
        if compiled.positional:
            args = tuple(params[name] for name in compiled.positiontup or ())
        with self.engine.connect() as conn:
            cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
            try:
                cursor.execute(compiled.string, args)
                return list(cursor.fetchall())
            finally:
                cursor.close()


def in_chunks(items: Sequence[str], size: int = IN_LIST_SIZE) -> Iterator[list[str]]:
    """Split an IN list into statements the databases accept."""
    for start in range(0, len(items), size):
        yield list(items[start : start + size])
