"""Reason codes (domain/reasons.py) beside the reasons: why a job ended, why it waits, why
its requeue was asked for, and why each event happened.

Rows written before carry no code (""), except what their message says for sure: a job
waiting for the scheduler, one that finished all its steps, and the submit event.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_JOB_CODES = ("reason_code", "pending_reason_code", "stop_reason_code")


def upgrade() -> None:
    with op.batch_alter_table("jobs", recreate="never") as batch:
        for name in _JOB_CODES:
            batch.add_column(sa.Column(name, sa.String(64), server_default="", nullable=False))
    with op.batch_alter_table("job_events", recreate="never") as batch:
        batch.add_column(
            sa.Column("reason_code", sa.String(64), server_default="", nullable=False)
        )
    op.execute(
        "UPDATE jobs SET pending_reason_code = 'Scheduler' "
        "WHERE pending_reason = 'waiting for the scheduler'"
    )
    op.execute(
        "UPDATE jobs SET reason_code = 'Completed' WHERE phase = 'SUCCEEDED' "
        "AND reason LIKE 'chief finished all steps%'"
    )
    op.execute(
        "UPDATE job_events SET reason_code = 'Submitted' "
        "WHERE from_phase IS NULL AND reason LIKE 'submitted by %'"
    )


def downgrade() -> None:
    with op.batch_alter_table("job_events", recreate="never") as batch:
        batch.drop_column("reason_code")
    with op.batch_alter_table("jobs", recreate="never") as batch:
        for name in reversed(_JOB_CODES):
            batch.drop_column(name)
