"""SQLAlchemy 2.0 tables. Alembic migrations in store/migrations must match these."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from appliance.domain.phases import ACTIVE, HOLDS_RESOURCES, Phase
from appliance.domain.wafer import WAFER_BYTES


class Base(DeclarativeBase):
    pass


# Literal predicates (not bound parameters), so the planners can match the partial indexes.
# Partial-index predicates (the migrations create the same indexes): derived from the domain's
# phase sets, in the order of the Phase enum, so the text stays what the migrations wrote.
ACTIVE_PHASES_SQL = text(
    "phase IN (" + ", ".join(f"'{p.value}'" for p in Phase if p in ACTIVE) + ")"
)
QUEUED_SQL = text(f"phase = '{Phase.QUEUED.value}'")
ARRAY_SQL = text("array_id <> ''")
# The phases of a job holding systems and nodes, for `JobRow.phase.in_(...)`.
HOLDING_PHASES = sorted(p.value for p in HOLDS_RESOURCES)


class JobRow(Base):
    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user: Mapped[str] = mapped_column(String(253), index=True)
    phase: Mapped[str] = mapped_column(String(16))
    # The spec: the fields queries need are columns (priority, queue, labels, and params_yaml,
    # which listings leave out); `spec` holds the others, as domain/spec_document.py writes them.
    priority: Mapped[int] = mapped_column(Integer)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON, server_default="{}")
    params_yaml: Mapped[str] = mapped_column(Text)
    # Labels are also rows of job_labels (for filtering); this copy is what reads return.
    labels: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    plan: Mapped[dict[str, Any]] = mapped_column(JSON)
    reason: Mapped[str] = mapped_column(Text, default="")
    pending_reason: Mapped[str] = mapped_column(Text, default="")
    systems: Mapped[str] = mapped_column(Text, default="")  # comma-separated system names
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    # Bumped by every write that changes what a job shows (phase, reasons, progress, replicas,
    # labels...), so readers can cache a summary under (id, version).
    version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    started_at: Mapped[float] = mapped_column(Float, default=0.0)
    finished_at: Mapped[float] = mapped_column(Float, default=0.0)
    progress: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # A leased job is cancelled when its client stops heartbeating (lease_seconds 0: detached).
    lease_seconds: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    lease_expires_at: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    lease_holder: Mapped[str] = mapped_column(String(300), default="", server_default="")
    # The owner's groups at submit time: members may act on the job too.
    groups: Mapped[list[str]] = mapped_column(JSON, default=list, server_default="[]")
    # Attempts begun (0 while never scheduled): a requeued job runs again as the next one.
    attempt: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # When the current attempt got its resources.
    scheduled_at: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    # Times the job went back to the queue to run again (restarts, preemptions, ...).
    restarts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # A requeue asked for (store/requeues.py): why (non-empty: the gang is to be torn down and
    # the job queued again), the deadline of a checkpoint asked of the chief first (0: none),
    # the step of the checkpoint it wrote, and the job a preemption makes room for.
    stop_reason: Mapped[str] = mapped_column(Text, default="", server_default="")
    checkpoint_by: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    checkpoint_step: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    preempted_by: Mapped[str] = mapped_column(String(64), default="", server_default="")
    preemptions: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The checkpoint step the current attempt resumed from (0: from the start).
    resumed_from: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # Restarts its restart policy allowed (after failures; preemptions do not count).
    retries: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The queue it was submitted to; the group its usage is charged to (its owner's first).
    queue: Mapped[str] = mapped_column(String(63), default="default", server_default="default")
    account_group: Mapped[str] = mapped_column(String(253), default="", server_default="")
    # When its current wait in the queue began (submit, or the last requeue).
    queued_at: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    # The codes of `reason`, `pending_reason` and `stop_reason` (domain/reasons.py; "": none,
    # as rows written before codes have).
    reason_code: Mapped[str] = mapped_column(String(64), default="", server_default="")
    pending_reason_code: Mapped[str] = mapped_column(String(64), default="", server_default="")
    stop_reason_code: Mapped[str] = mapped_column(String(64), default="", server_default="")
    # A task of an array (domain/arrays.py; "": none): the array's id, the task's index, the
    # array's cap of tasks running at once (0: none) and the task's sweep overrides.
    array_id: Mapped[str] = mapped_column(String(64), default="", server_default="")
    array_index: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    array_cap: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    array_overrides: Mapped[dict[str, str]] = mapped_column(
        JSON, default=dict, server_default="{}"
    )
    # Its hold (domain/holds.py): "" (none), "user" or "admin"; who put it; whether it
    # suspended the job while it ran. A held queued job keeps its place; admission skips it.
    hold: Mapped[str] = mapped_column(String(8), default="", server_default="")
    held_by: Mapped[str] = mapped_column(String(253), default="", server_default="")
    suspended: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # Its time limit in seconds (domain/time_limits.py; 0: none), and the seconds its ended
    # attempts ran (RUNNING): the current attempt ends at started_at + time_limit - ran_seconds.
    time_limit: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    ran_seconds: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")

    __table_args__ = (
        Index("ix_jobs_created", "created_at", "id", "version"),
        # An array's tasks (resolving an array id; its cap in admission): arrays' rows only.
        Index(
            "ix_jobs_array", "array_id", "array_index",
            sqlite_where=ARRAY_SQL, postgresql_where=ARRAY_SQL,
        ),
        Index("ix_jobs_phase", "phase"),
        # The default list view (active jobs, newest first) and the queue in admission order,
        # each read from a small partial index instead of sorting the whole history.
        Index(
            "ix_jobs_active_created", "created_at", "id",
            sqlite_where=ACTIVE_PHASES_SQL, postgresql_where=ACTIVE_PHASES_SQL,
        ),
        Index(
            "ix_jobs_queue", "priority", "created_at", "id",
            sqlite_where=QUEUED_SQL, postgresql_where=QUEUED_SQL,
        ),
        Index("ix_jobs_queue_name", "queue"),
        Index("ix_jobs_finished_at", "finished_at"),
    )  # fmt: skip


class JobRenderingRow(Base):
    """A door's rendering of one version of a job's summary, kept across restarts: served only
    while the job is still at `version` and the code is still `form` (store/listing.py). Keyed in
    listing order, so a listing reads a run of them in one scan."""

    __tablename__ = "job_renderings"

    created_at: Mapped[float] = mapped_column(Float, primary_key=True)
    job_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True
    )
    version: Mapped[int] = mapped_column(Integer)
    form: Mapped[str] = mapped_column(String(64))
    queued: Mapped[bool] = mapped_column(Boolean)
    data: Mapped[bytes] = mapped_column(LargeBinary)

    # SQLite: the rows themselves in key order (no rowid table beside the key's index).
    __table_args__ = {"sqlite_with_rowid": False}


class JobLabelRow(Base):
    __tablename__ = "job_labels"

    job_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[str] = mapped_column(String(317), primary_key=True)
    value: Mapped[str] = mapped_column(String(63))

    __table_args__ = (Index("ix_job_labels_kv", "key", "value"),)


class JobEventRow(Base):
    __tablename__ = "job_events"

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("jobs.id", ondelete="CASCADE"), index=True
    )
    time: Mapped[float] = mapped_column(Float)
    from_phase: Mapped[str | None] = mapped_column(String(16), nullable=True)
    to_phase: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    reason_code: Mapped[str] = mapped_column(String(64), default="", server_default="")


class ReplicaRow(Base):
    __tablename__ = "replicas"

    job_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True
    )
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    role: Mapped[str] = mapped_column(String(16))
    index: Mapped[int] = mapped_column(Integer)
    node: Mapped[str] = mapped_column(String(253))
    phase: Mapped[str] = mapped_column(String(16))
    address: Mapped[str] = mapped_column(String(253), default="")
    pid: Mapped[int] = mapped_column(Integer, default=0)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    message: Mapped[str] = mapped_column(Text, default="")
    log_tail: Mapped[str] = mapped_column(Text, default="")
    # Written by the replica's heartbeat, only when it changed (ReplicaStore.set_data_planes).
    data_plane: Mapped[str] = mapped_column(Text, default="", server_default="")


class AttemptRow(Base):
    """One ended attempt of a job: when it ran, on which systems, and why it ended."""

    __tablename__ = "job_attempts"

    job_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True
    )
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    scheduled_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float] = mapped_column(Float)  # RUNNING (0: it never got there)
    ended_at: Mapped[float] = mapped_column(Float)
    systems: Mapped[str] = mapped_column(Text)
    reason: Mapped[str] = mapped_column(Text)
    ended_in: Mapped[str] = mapped_column(String(16))  # QUEUED (requeued) or a terminal phase
    resumed_from: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # When it began to wait (submit or requeue): its queue wait is scheduled_at - queued_at.
    queued_at: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    # What it held: CS-2 systems and MemoryX bytes (usage is these times its duration).
    system_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    memoryx_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # The job whose preemption ended it ("": it was not preempted).
    preempted_by: Mapped[str] = mapped_column(String(64), default="", server_default="")
    # Its usage is in its queue's fair-share usage (store/queue_defs.py folds it in once).
    folded: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())

    __table_args__ = (
        Index("ix_job_attempts_ended_at", "ended_at"),
        Index("ix_job_attempts_folded", "folded"),
    )


class JobDependencyRow(Base):
    """A job waits for another to end (`condition`: afterok, afterany or afternotok)."""

    __tablename__ = "job_dependencies"

    job_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True
    )
    depends_on: Mapped[str] = mapped_column(String(64), primary_key=True, index=True)
    condition: Mapped[str] = mapped_column(String(16))


class QueueRow(Base):
    """An admin-defined queue (domain/queues.py says what each field means)."""

    __tablename__ = "queues"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    systems: Mapped[int | None] = mapped_column(Integer, nullable=True)
    memoryx_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    weight: Mapped[float] = mapped_column(Float)
    borrow_systems: Mapped[int | None] = mapped_column(Integer, nullable=True)
    borrow_memoryx_bytes: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    lend: Mapped[bool] = mapped_column(Boolean)
    groups: Mapped[list[str]] = mapped_column(JSON)
    # "file" (the queues file) or "admin" (set at run time; updated_by says who).
    source: Mapped[str] = mapped_column(String(16))
    updated_by: Mapped[str] = mapped_column(String(253), default="", server_default="")
    updated_at: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    # Caps per user inside the queue (None: none): running jobs, queued jobs, systems in use.
    max_running_jobs_per_user: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_queued_jobs_per_user: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_systems_per_user: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Time limits in seconds: a job's when it gives none, and the most it may ask (None: none).
    default_time_limit: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_time_limit: Mapped[int | None] = mapped_column(Integer, nullable=True)


class QueueUsageRow(Base):
    """A queue's fair-share usage of ended attempts, decayed to `as_of`."""

    __tablename__ = "queue_usage"

    queue: Mapped[str] = mapped_column(String(63), primary_key=True)
    system_seconds: Mapped[float] = mapped_column(Float)
    memoryx_byte_seconds: Mapped[float] = mapped_column(Float)
    as_of: Mapped[float] = mapped_column(Float)


class ClusterMetaRow(Base):
    """Small facts about the cluster's configuration (the queues file last applied)."""

    __tablename__ = "cluster_meta"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class NodeRow(Base):
    """One entry of the pool: a CS-2 system, a MemoryX node or a SwarmX node."""

    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(253), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    capacity: Mapped[int] = mapped_column(BigInteger)
    state: Mapped[str] = mapped_column(String(16))
    # Why an admin set the state, and when (0: never changed).
    reason: Mapped[str] = mapped_column(Text, default="", server_default="")
    since: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    # A system's on-chip memory (other kinds: the default, unused).
    wafer_bytes: Mapped[int] = mapped_column(
        BigInteger, default=WAFER_BYTES, server_default=str(WAFER_BYTES)
    )


class NodeEventRow(Base):
    """One change of a node's state, by whom and why."""

    __tablename__ = "node_events"

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node: Mapped[str] = mapped_column(String(253), index=True)
    time: Mapped[float] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text)
    by: Mapped[str] = mapped_column(String(253))


class PlacementRow(Base):
    """What a job holds on a node while it is SCHEDULED, INITIALIZING or RUNNING."""

    __tablename__ = "placements"

    job_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True
    )
    replica: Mapped[str] = mapped_column(String(64), primary_key=True)
    node: Mapped[str] = mapped_column(String(253), ForeignKey("nodes.name"), index=True)
    amount: Mapped[int] = mapped_column(BigInteger)


class CoordinatorLeaseRow(Base):
    """The leader-election lease when there is no Kubernetes cluster (store/leadership.py):
    who holds it, under which epoch, and a counter every write bumps (compare-and-set)."""

    __tablename__ = "coordinator_leases"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    holder: Mapped[str] = mapped_column(String(253))
    epoch: Mapped[int] = mapped_column(BigInteger)
    duration_seconds: Mapped[float] = mapped_column(Float)
    version: Mapped[int] = mapped_column(BigInteger)
    renewed_at: Mapped[float] = mapped_column(Float)  # wall time, for people reading it


class LeaderFenceRow(Base):
    """The newest epoch a leader took office under; phase writes under any other are refused."""

    __tablename__ = "leader_fence"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    epoch: Mapped[int] = mapped_column(BigInteger)
    holder: Mapped[str] = mapped_column(String(253))
    since: Mapped[float] = mapped_column(Float)
    # The application_name of the holder's PostgreSQL sessions (store/engine.py), which the
    # next leader ends on taking office; "" on SQLite.
    sessions: Mapped[str] = mapped_column(String(63), server_default="")


class AuditEventRow(Base):
    """One record of the audit log (domain/audit.py): append-only; only retention deletes
    (store/audit.py). Never a token nor a body: a body's digest and size at level Request."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float)
    request_id: Mapped[str] = mapped_column(String(64))
    user: Mapped[str] = mapped_column(String(253))
    groups: Mapped[list[str]] = mapped_column(JSON)
    admin: Mapped[bool] = mapped_column(Boolean)
    source: Mapped[str] = mapped_column(String(255))
    door: Mapped[str] = mapped_column(String(8))
    verb: Mapped[str] = mapped_column(String(64))
    object_kind: Mapped[str] = mapped_column(String(64))
    object_name: Mapped[str] = mapped_column(String(253))
    outcome: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text)
    body_sha256: Mapped[str] = mapped_column(String(64))
    body_bytes: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (
        Index("ix_audit_events_at", "at"),
        Index("ix_audit_events_user_id", "user", "id"),
        Index("ix_audit_events_verb_id", "verb", "id"),
    )


class ReservationRow(Base):
    """Nodes booked for a window [start, end) (domain/reservations.py): for maintenance, or
    for the jobs of its users, groups or queue. Ended ones are deleted at the next booking."""

    __tablename__ = "reservations"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    start: Mapped[float] = mapped_column(Float)
    end: Mapped[float] = mapped_column(Float, index=True)
    nodes: Mapped[list[str]] = mapped_column(JSON)
    maint: Mapped[bool] = mapped_column(Boolean)
    users: Mapped[list[str]] = mapped_column(JSON)
    groups: Mapped[list[str]] = mapped_column(JSON)
    queue: Mapped[str] = mapped_column(String(63))
    creator: Mapped[str] = mapped_column(String(253))
    created_at: Mapped[float] = mapped_column(Float)
