"""Holds (#37): a job's hold ("" none, "user" or "admin"), who put it, and whether it
suspended the job while it ran.

Revision ID: 0016
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", recreate="never") as batch:
        batch.add_column(sa.Column("hold", sa.String(8), server_default="", nullable=False))
        batch.add_column(sa.Column("held_by", sa.String(253), server_default="", nullable=False))
        batch.add_column(
            sa.Column("suspended", sa.Boolean(), server_default=sa.false(), nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs", recreate="never") as batch:
        for name in ("suspended", "held_by", "hold"):
            batch.drop_column(name)
