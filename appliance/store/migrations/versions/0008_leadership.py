"""Leader election and fencing for several coordinators on one PostgreSQL database.

`coordinator_leases` holds the election lease when there is no Kubernetes cluster (in a
cluster a coordination.k8s.io Lease does): holder, epoch, duration and a version counter for
compare-and-set. `leader_fence` holds the newest epoch a leader took office under, with one row
('coordinator', epoch 0) from the start; every phase write of a coordinator running with
election checks it in its own transaction (store/leadership.py).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "coordinator_leases",
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("holder", sa.String(253), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("duration_seconds", sa.Float(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("renewed_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "leader_fence",
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("holder", sa.String(253), nullable=False),
        sa.Column("since", sa.Float(), nullable=False),
    )
    op.execute(
        "INSERT INTO leader_fence (name, epoch, holder, since) VALUES ('coordinator', 0, '', 0)"
    )


def downgrade() -> None:
    op.drop_table("leader_fence")
    op.drop_table("coordinator_leases")
