"""Holds (#37): a job's hold ("" none, "user" or "admin"), who put it, and whether it
suspended the job while it ran; and a queue's caps per user (running jobs, queued jobs,
systems in use; NULL: none).

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_QUEUE_CAPS = ("max_running_jobs_per_user", "max_queued_jobs_per_user", "max_systems_per_user")


def upgrade() -> None:
    with op.batch_alter_table("jobs", recreate="never") as batch:
        batch.add_column(sa.Column("hold", sa.String(8), server_default="", nullable=False))
        batch.add_column(sa.Column("held_by", sa.String(253), server_default="", nullable=False))
        batch.add_column(
            sa.Column("suspended", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
    with op.batch_alter_table("queues", recreate="never") as batch:
        for name in _QUEUE_CAPS:
            batch.add_column(sa.Column(name, sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("queues", recreate="never") as batch:
        for name in reversed(_QUEUE_CAPS):
            batch.drop_column(name)
    with op.batch_alter_table("jobs", recreate="never") as batch:
        for name in ("suspended", "held_by", "hold"):
            batch.drop_column(name)
