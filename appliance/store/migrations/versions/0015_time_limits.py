"""Time limits (#37): a queue's default and maximum time limit (seconds, NULL: none), and on
each job its limit (seconds, 0: none) and the seconds its ended attempts ran, so the loops and
the scheduler read when a running job's limit ends without parsing its spec.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("queues", recreate="never") as batch:
        batch.add_column(sa.Column("default_time_limit", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("max_time_limit", sa.Integer(), nullable=True))
    with op.batch_alter_table("jobs", recreate="never") as batch:
        batch.add_column(sa.Column("time_limit", sa.Integer(), server_default="0", nullable=False))
        batch.add_column(sa.Column("ran_seconds", sa.Float(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("jobs", recreate="never") as batch:
        batch.drop_column("ran_seconds")
        batch.drop_column("time_limit")
    with op.batch_alter_table("queues", recreate="never") as batch:
        batch.drop_column("max_time_limit")
        batch.drop_column("default_time_limit")
