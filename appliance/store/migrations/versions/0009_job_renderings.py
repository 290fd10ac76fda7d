"""Renderings of job summaries kept across restarts (store/listing.py, services/listing.py).

`job_renderings` holds a door's rendering of one version of a job's summary: the bytes, the
job's `version` they show, the `form` (the code) that rendered them, and whether the job was
queued. Keyed by (created_at, job_id), the order listings read jobs in; on SQLite without a
rowid, so the rows themselves lie in that order.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_renderings",
        sa.Column("created_at", sa.Float(), primary_key=True),
        sa.Column(
            "job_id",
            sa.String(64),
            sa.ForeignKey("jobs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("form", sa.String(64), nullable=False),
        sa.Column("queued", sa.Boolean(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    op.drop_table("job_renderings")
