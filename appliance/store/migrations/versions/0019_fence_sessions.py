"""The officeholder's database sessions (#17, HA): `leader_fence.sessions` is the
application_name its PostgreSQL sessions carry, so the next leader can end them on taking
office (a leader paused between a write and its commit still holds that write's locks).

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("leader_fence") as batch:
        batch.add_column(sa.Column("sessions", sa.String(63), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("leader_fence") as batch:
        batch.drop_column("sessions")
