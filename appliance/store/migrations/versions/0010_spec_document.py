"""A job's spec as one JSON document (#31): `jobs.spec`.

The spec fields no query filters, orders, indexes or changes in place move into `jobs.spec`
(domain/spec_document.py's stored document, version 1): mode, num_csx, num_steps, model_dir,
max_restarts and preemptible. priority, queue and labels stay columns (ordered, filtered,
changed in place), and so does params_yaml (listings leave it out). A new spec field then
needs no migration: the document's readers give a missing key its default.

The document is filled in SQL (one statement per dialect), then the moved columns are dropped.
On SQLite they are dropped in place (ALTER TABLE DROP COLUMN, SQLite 3.35+), not by copying
the table: with foreign keys on, dropping the old copy of `jobs` would cascade to every table
that references it.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

MOVED = ("mode", "num_csx", "num_steps", "model_dir", "max_restarts", "preemptible")

# The document version 1 as 0010 writes it; later code reads it whatever it adds.
_FILL_SQLITE = """
UPDATE jobs SET spec = json_object(
    'v', 1, 'num_csx', num_csx, 'num_steps', num_steps, 'mode', mode, 'model_dir', model_dir,
    'max_restarts', max_restarts,
    'preemptible', json(CASE WHEN preemptible THEN 'true' ELSE 'false' END)
)
"""
_FILL_POSTGRESQL = """
UPDATE jobs SET spec = json_build_object(
    'v', 1, 'num_csx', num_csx, 'num_steps', num_steps, 'mode', mode, 'model_dir', model_dir,
    'max_restarts', max_restarts, 'preemptible', preemptible
)
"""


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    with op.batch_alter_table("jobs", recreate="never") as batch:
        batch.add_column(sa.Column("spec", sa.JSON(), server_default="{}", nullable=False))
    op.execute(_FILL_SQLITE if sqlite else _FILL_POSTGRESQL)
    with op.batch_alter_table("jobs", recreate="never") as batch:
        for column in MOVED:
            batch.drop_column(column)


_UNFILL_SQLITE = """
UPDATE jobs SET
    mode = json_extract(spec, '$.mode'), num_csx = json_extract(spec, '$.num_csx'),
    num_steps = json_extract(spec, '$.num_steps'), model_dir = json_extract(spec, '$.model_dir'),
    max_restarts = json_extract(spec, '$.max_restarts'),
    preemptible = coalesce(json_extract(spec, '$.preemptible'), 1)
"""
_UNFILL_POSTGRESQL = """
UPDATE jobs SET
    mode = spec->>'mode', num_csx = (spec->>'num_csx')::integer,
    num_steps = (spec->>'num_steps')::bigint, model_dir = spec->>'model_dir',
    max_restarts = (spec->>'max_restarts')::integer,
    preemptible = coalesce((spec->>'preemptible')::boolean, true)
"""


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    with op.batch_alter_table("jobs", recreate="never") as batch:
        batch.add_column(sa.Column("mode", sa.String(32), server_default="train", nullable=False))
        batch.add_column(sa.Column("num_csx", sa.Integer(), server_default="0", nullable=False))
        batch.add_column(
            sa.Column("num_steps", sa.BigInteger(), server_default="0", nullable=False)
        )
        batch.add_column(sa.Column("model_dir", sa.Text(), server_default="", nullable=False))
        batch.add_column(sa.Column("max_restarts", sa.Integer(), nullable=True))
        batch.add_column(
            sa.Column("preemptible", sa.Boolean(), server_default=sa.true(), nullable=False)
        )
    op.execute(_UNFILL_SQLITE if sqlite else _UNFILL_POSTGRESQL)
    with op.batch_alter_table("jobs", recreate="never") as batch:
        batch.drop_column("spec")
