"""The audit log (#36): one append-only row per mutating call and per refusal at every door
(store/audit.py). Retention is the only delete.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("user", sa.String(253), nullable=False),
        sa.Column("groups", sa.JSON(), nullable=False),
        sa.Column("admin", sa.Boolean(), nullable=False),
        sa.Column("source", sa.String(255), nullable=False),
        sa.Column("door", sa.String(8), nullable=False),
        sa.Column("verb", sa.String(64), nullable=False),
        sa.Column("object_kind", sa.String(64), nullable=False),
        sa.Column("object_name", sa.String(253), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("body_sha256", sa.String(64), nullable=False),
        sa.Column("body_bytes", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_audit_events_at", "audit_events", ["at"])
    op.create_index("ix_audit_events_user_id", "audit_events", ["user", "id"])
    op.create_index("ix_audit_events_verb_id", "audit_events", ["verb", "id"])


def downgrade() -> None:
    op.drop_table("audit_events")
