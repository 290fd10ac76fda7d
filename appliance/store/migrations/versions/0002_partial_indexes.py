"""Job summary versions; partial indexes for the active-jobs view and the queue.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy import text

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

ACTIVE = "phase IN ('QUEUED', 'SCHEDULED', 'INITIALIZING', 'RUNNING')"
QUEUED = "phase = 'QUEUED'"


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("version", sa.Integer(), server_default="0", nullable=False))
    op.drop_index("ix_jobs_created", table_name="jobs")
    op.create_index("ix_jobs_created", "jobs", ["created_at", "id", "version"])
    op.drop_index("ix_jobs_phase_created", table_name="jobs")
    op.create_index("ix_jobs_phase", "jobs", ["phase"])
    op.create_index(
        "ix_jobs_active_created", "jobs", ["created_at", "id"],
        sqlite_where=text(ACTIVE), postgresql_where=text(ACTIVE),
    )  # fmt: skip
    op.create_index(
        "ix_jobs_queue", "jobs", ["priority", "created_at", "id"],
        sqlite_where=text(QUEUED), postgresql_where=text(QUEUED),
    )  # fmt: skip


def downgrade() -> None:
    op.drop_index("ix_jobs_queue", table_name="jobs")
    op.drop_index("ix_jobs_active_created", table_name="jobs")
    op.drop_index("ix_jobs_phase", table_name="jobs")
    op.create_index("ix_jobs_phase_created", "jobs", ["phase", "created_at", "id"])
    op.drop_index("ix_jobs_created", table_name="jobs")
    op.create_index("ix_jobs_created", "jobs", ["created_at", "id"])
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("version")
