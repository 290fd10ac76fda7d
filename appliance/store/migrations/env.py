"""Alembic environment: runs against the engine handed over in config.attributes.

On SQLite a batch migration (render_as_batch) may copy a table: create the new one, copy the
rows, drop the old one. With foreign keys on, dropping the old `jobs` cascades to every row that
references it (events, labels, replicas, attempts, dependencies), so foreign keys are off while
migrations run, as SQLite's own ALTER TABLE procedure asks, and the references are checked at
the end: a migration that broke one fails, and no coordinator starts on the store.
"""

from __future__ import annotations

from alembic import context

from appliance.store.tables import Base

engine = context.config.attributes["engine"]
sqlite = engine.dialect.name == "sqlite"
with engine.connect() as connection:
    if sqlite:  # outside any transaction, where SQLite takes it
        connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
        connection.commit()
    try:
        context.configure(
            connection=connection, target_metadata=Base.metadata, render_as_batch=sqlite
        )
        with context.begin_transaction():
            context.run_migrations()
            if sqlite:
                broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                if broken:
                    raise RuntimeError(f"a migration broke {len(broken)} references: {broken[:3]}")
    finally:
        if sqlite:
            connection.exec_driver_sql("PRAGMA foreign_keys=ON")
            connection.commit()
