"""Job arrays and sweeps (#37): a task's array id, index, its array's cap of tasks running at
once and its sweep overrides; an index over arrays' rows only. Rows written before are no
array's tasks ('', 0, 0, {}).

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_ARRAY_SQL = sa.text("array_id <> ''")


def upgrade() -> None:
    with op.batch_alter_table("jobs", recreate="never") as batch:
        batch.add_column(sa.Column("array_id", sa.String(64), server_default="", nullable=False))
        batch.add_column(
            sa.Column("array_index", sa.Integer(), server_default="0", nullable=False)
        )
        batch.add_column(sa.Column("array_cap", sa.Integer(), server_default="0", nullable=False))
        batch.add_column(
            sa.Column("array_overrides", sa.JSON(), server_default="{}", nullable=False)
        )
    op.create_index(
        "ix_jobs_array",
        "jobs",
        ["array_id", "array_index"],
        sqlite_where=_ARRAY_SQL,
        postgresql_where=_ARRAY_SQL,
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_array", table_name="jobs")
    with op.batch_alter_table("jobs", recreate="never") as batch:
        for column in ("array_overrides", "array_cap", "array_index", "array_id"):
            batch.drop_column(column)
