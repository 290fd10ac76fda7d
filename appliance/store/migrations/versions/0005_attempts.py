"""Attempts: a job runs again after a requeue (restart, preemption, a system taken away).

jobs.attempt counts the attempts begun (0 while never scheduled) and jobs.scheduled_at is
when the current one got its resources; jobs.max_restarts is the job's restart policy (NULL:
the cluster's default); jobs.restarts counts its returns to the queue; job_attempts keeps each
ended attempt.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("attempt", sa.Integer(), server_default="0", nullable=False))
        batch.add_column(sa.Column("scheduled_at", sa.Float(), server_default="0", nullable=False))
        batch.add_column(sa.Column("max_restarts", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("restarts", sa.Integer(), server_default="0", nullable=False))
    # Every job that was ever scheduled had one attempt (there was no requeue before).
    op.execute(
        "UPDATE jobs SET attempt = 1 WHERE id IN "
        "(SELECT job_id FROM job_events WHERE to_phase = 'SCHEDULED')"
    )
    op.create_table(
        "job_attempts",
        sa.Column(
            "job_id",
            sa.String(64),
            sa.ForeignKey("jobs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("attempt", sa.Integer(), primary_key=True),
        sa.Column("scheduled_at", sa.Float(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=False),
        sa.Column("systems", sa.Text(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("ended_in", sa.String(16), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("job_attempts")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("restarts")
        batch.drop_column("max_restarts")
        batch.drop_column("scheduled_at")
        batch.drop_column("attempt")
