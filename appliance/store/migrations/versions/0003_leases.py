"""Client leases on jobs.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("lease_seconds", sa.Float(), server_default="0", nullable=False)
        )
        batch.add_column(
            sa.Column("lease_expires_at", sa.Float(), server_default="0", nullable=False)
        )
        batch.add_column(
            sa.Column("lease_holder", sa.String(length=300), server_default="", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("lease_holder")
        batch.drop_column("lease_expires_at")
        batch.drop_column("lease_seconds")
