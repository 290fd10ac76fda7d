"""Requeue requests: a holding job that is to stop and run again, and why.

jobs.stop_reason (non-empty) marks a job whose gang is to be torn down and which then goes back
to the queue with that reason: a retryable failure, a preemption, a system taken away. It is
written before anything is torn down, so a coordinator that dies midway finishes the requeue
when it comes back. jobs.checkpoint_by is the deadline of a checkpoint asked of the chief first
(0: none asked) and jobs.checkpoint_step the step of the one it wrote (NULL: not yet).
jobs.preempted_by names the job a preemption makes room for; jobs.preemptible is the victim-side
opt-out (admins only); jobs.preemptions counts the job's preemptions; jobs.resumed_from is the
checkpoint step the current attempt resumed from, and job_attempts.resumed_from keeps it per
attempt; jobs.retries counts the restarts its restart policy allowed (after failures, not
preemptions).

Nodes get the reason and time of their admin-set state, and node_events records each change.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("stop_reason", sa.Text(), server_default="", nullable=False))
        batch.add_column(
            sa.Column("checkpoint_by", sa.Float(), server_default="0", nullable=False)
        )
        batch.add_column(sa.Column("checkpoint_step", sa.BigInteger(), nullable=True))
        batch.add_column(
            sa.Column("preempted_by", sa.String(64), server_default="", nullable=False)
        )
        batch.add_column(
            sa.Column("preemptible", sa.Boolean(), server_default=sa.true(), nullable=False)
        )
        batch.add_column(
            sa.Column("preemptions", sa.Integer(), server_default="0", nullable=False)
        )
        batch.add_column(
            sa.Column("resumed_from", sa.BigInteger(), server_default="0", nullable=False)
        )
        batch.add_column(sa.Column("retries", sa.Integer(), server_default="0", nullable=False))
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("reason", sa.Text(), server_default="", nullable=False))
        batch.add_column(sa.Column("since", sa.Float(), server_default="0", nullable=False))
    op.create_table(
        "node_events",
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("by", sa.String(253), nullable=False),
    )
    op.create_index("ix_node_events_node", "node_events", ["node"])
    with op.batch_alter_table("job_attempts") as batch:
        batch.add_column(
            sa.Column("resumed_from", sa.BigInteger(), server_default="0", nullable=False)
        )


def downgrade() -> None:
    op.drop_table("node_events")
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("since")
        batch.drop_column("reason")
    with op.batch_alter_table("job_attempts") as batch:
        batch.drop_column("resumed_from")
    with op.batch_alter_table("jobs") as batch:
        for column in (
            "retries", "resumed_from", "preemptions", "preemptible", "preempted_by",
            "checkpoint_step", "checkpoint_by", "stop_reason",
        ):  # fmt: skip
            batch.drop_column(column)
