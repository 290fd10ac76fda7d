"""Queues, fair-share usage, job dependencies and what usage accounting reads.

`queues` holds the admins' queue definitions (quota of CS-2 systems and of MemoryX bytes, the
fair-share weight, how much it may borrow, whether it lends, who may submit), from the queues
file or set at run time; `cluster_meta` remembers the digest of the queues file last applied,
so a file change is told apart from a restart. `queue_usage` is each queue's usage, decayed
with the fair-share half-life to `as_of`, folded in as attempts end.

jobs.queue is the queue a job was submitted to; jobs.account_group the group it is charged to
(its owner's first group); jobs.queued_at when its current wait began (submit or requeue).
Each ended attempt keeps when it was queued, what it held (systems, MemoryX bytes), the job
that preempted it, if one did, and whether its usage is in its queue's yet (`folded`).
job_dependencies: a job waits for others (afterok, afterany, afternotok).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "queues",
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("systems", sa.Integer(), nullable=True),
        sa.Column("memoryx_bytes", sa.BigInteger(), nullable=True),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("borrow_systems", sa.Integer(), nullable=True),
        sa.Column("borrow_memoryx_bytes", sa.BigInteger(), nullable=True),
        sa.Column("lend", sa.Boolean(), nullable=False),
        sa.Column("groups", sa.JSON(), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("updated_by", sa.String(253), server_default="", nullable=False),
        sa.Column("updated_at", sa.Float(), server_default="0", nullable=False),
    )
    op.create_table(
        "queue_usage",
        sa.Column("queue", sa.String(63), primary_key=True),
        sa.Column("system_seconds", sa.Float(), nullable=False),
        sa.Column("memoryx_byte_seconds", sa.Float(), nullable=False),
        sa.Column("as_of", sa.Float(), nullable=False),
    )
    op.create_table(
        "cluster_meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
    )
    # The row every change of the queues locks (it holds the queues file's digest).
    op.execute("INSERT INTO cluster_meta (key, value) VALUES ('queues_file_digest', '')")
    op.create_table(
        "job_dependencies",
        sa.Column(
            "job_id", sa.String(64), sa.ForeignKey("jobs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("depends_on", sa.String(64), primary_key=True),
        sa.Column("condition", sa.String(16), nullable=False),
    )  # fmt: skip
    op.create_index("ix_job_dependencies_depends_on", "job_dependencies", ["depends_on"])
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("queue", sa.String(63), server_default="default", nullable=False)
        )
        batch.add_column(
            sa.Column("account_group", sa.String(253), server_default="", nullable=False)
        )
        batch.add_column(sa.Column("queued_at", sa.Float(), server_default="0", nullable=False))
    op.create_index("ix_jobs_queue_name", "jobs", ["queue"])
    op.create_index("ix_jobs_finished_at", "jobs", ["finished_at"])
    # A job's wait began at its submit, or at its last requeue.
    op.execute(
        "UPDATE jobs SET queued_at = COALESCE((SELECT max(a.ended_at) FROM job_attempts a "
        "WHERE a.job_id = jobs.id AND a.ended_in = 'QUEUED'), created_at)"
    )
    with op.batch_alter_table("job_attempts") as batch:
        batch.add_column(sa.Column("queued_at", sa.Float(), server_default="0", nullable=False))
        batch.add_column(
            sa.Column("system_count", sa.Integer(), server_default="0", nullable=False)
        )
        batch.add_column(
            sa.Column("memoryx_bytes", sa.BigInteger(), server_default="0", nullable=False)
        )
        batch.add_column(
            sa.Column("preempted_by", sa.String(64), server_default="", nullable=False)
        )
        batch.add_column(
            sa.Column("folded", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
    op.create_index("ix_job_attempts_ended_at", "job_attempts", ["ended_at"])
    op.create_index("ix_job_attempts_folded", "job_attempts", ["folded"])
    # What earlier attempts held of systems is in their list of systems (MemoryX is unknown).
    op.execute(
        "UPDATE job_attempts SET system_count = "
        "length(systems) - length(replace(systems, ',', '')) + 1 WHERE systems != ''"
    )


def downgrade() -> None:
    op.drop_index("ix_job_attempts_folded", "job_attempts")
    op.drop_index("ix_job_attempts_ended_at", "job_attempts")
    with op.batch_alter_table("job_attempts") as batch:
        for column in ("folded", "preempted_by", "memoryx_bytes", "system_count", "queued_at"):
            batch.drop_column(column)
    op.drop_index("ix_jobs_finished_at", "jobs")
    op.drop_index("ix_jobs_queue_name", "jobs")
    with op.batch_alter_table("jobs") as batch:
        for column in ("queued_at", "account_group", "queue"):
            batch.drop_column(column)
    op.drop_table("job_dependencies")
    op.drop_table("cluster_meta")
    op.drop_table("queue_usage")
    op.drop_table("queues")
