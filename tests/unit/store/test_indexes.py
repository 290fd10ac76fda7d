"""The partial indexes the migrations create are the ones the queries can use: their predicates
are the domain's phase sets (tables.py derives them), so a phase added to ACTIVE without a
migration that rebuilds the index fails here, not as an index no query can use."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from appliance.store.engine import make_engine, migrate
from appliance.store.tables import ACTIVE_PHASES_SQL, QUEUED_SQL


def test_migrated_partial_indexes_match_the_domains_phase_sets(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'jobs.db'}")
    try:
        migrate(engine)
        with engine.connect() as conn:
            created = dict(conn.execute(text("SELECT name, sql FROM sqlite_master")).all())
    finally:
        engine.dispose()
    assert created["ix_jobs_active_created"].endswith(f"WHERE {ACTIVE_PHASES_SQL.text}")
    assert created["ix_jobs_queue"].endswith(f"WHERE {QUEUED_SQL.text}")
