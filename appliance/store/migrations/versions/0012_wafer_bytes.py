"""Each node's wafer bytes: a CS-2 system's on-chip memory (#34). Rows written before get a
CS-2's 40 GB; the coordinator's start syncs the configured figure over them.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_CS2_WAFER_BYTES = 40 * 10**9  # as it was when this ran: a migration does not follow the code


def upgrade() -> None:
    with op.batch_alter_table("nodes", recreate="never") as batch:
        batch.add_column(
            sa.Column(
                "wafer_bytes",
                sa.BigInteger(),
                server_default=str(_CS2_WAFER_BYTES),
                nullable=False,
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("nodes", recreate="never") as batch:
        batch.drop_column("wafer_bytes")
