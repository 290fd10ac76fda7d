"""Each replica's data plane: how it reaches its peers (shared memory or gRPC), as its heartbeat
says (#35). Rows written before say nothing ('').

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("replicas", recreate="never") as batch:
        batch.add_column(sa.Column("data_plane", sa.Text(), server_default="", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("replicas", recreate="never") as batch:
        batch.drop_column("data_plane")
