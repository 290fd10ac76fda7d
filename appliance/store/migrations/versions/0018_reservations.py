"""Reservations (#37): nodes booked for a window, for maintenance or for named users, groups
or a queue (domain/reservations.py).

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reservations",
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("start", sa.Float(), nullable=False),
        sa.Column("end", sa.Float(), nullable=False),
        sa.Column("nodes", sa.JSON(), nullable=False),
        sa.Column("maint", sa.Boolean(), nullable=False),
        sa.Column("users", sa.JSON(), nullable=False),
        sa.Column("groups", sa.JSON(), nullable=False),
        sa.Column("queue", sa.String(63), nullable=False),
        sa.Column("creator", sa.String(253), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_reservations_end", "reservations", ["end"])


def downgrade() -> None:
    op.drop_index("ix_reservations_end", table_name="reservations")
    op.drop_table("reservations")
