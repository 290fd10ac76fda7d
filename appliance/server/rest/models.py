"""Typed REST documents (pydantic v2) and their conversions from the domain types (request
bodies: requests.py).

The REST shapes mirror the gRPC messages field for field (appliance/protocol/convert.py), with
JSON-friendly values: phases as "QUEUED", modes as "train", priorities as "P2" (as csctl shows
them; "p2" is taken too), and moments as RFC 3339 UTC strings ("2026-01-02T03:04:05Z"), null
for one that has not happened (appliance/domain/timestamps.py: csctl -o json writes the same).
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from appliance.domain.job import (
    EventKind,
    Job,
    JobEvent,
    Lease,
    Progress,
    ReplicaPhase,
)
from appliance.domain.job_document import job_document, lease_document, progress_document
from appliance.domain.phases import Phase
from appliance.domain.spec import Mode
from appliance.domain.timestamps import utc_moment
from appliance.server.rest.spec_models import PriorityName as PriorityName
from appliance.server.rest.spec_models import StrictBool as StrictBool
from appliance.server.rest.spec_models import StrictInt as StrictInt
from appliance.server.rest.spec_models import with_spec_fields


def _upper(value: object) -> object:
    return value.upper() if isinstance(value, str) else value


# A priority in a request: P0..P3, in either case (csctl and the launcher take "p1").
PriorityIn = Annotated[PriorityName, BeforeValidator(_upper)]
# A moment in a response: RFC 3339, UTC, to the second; null when it has not happened.
Moment = Annotated[
    datetime.datetime | None,
    Field(description="RFC 3339, UTC (2026-01-02T03:04:05Z); null: not (yet) happened."),
]


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CancelJobsOut(_Out):
    """What a bulk cancel did; each list holds the first 1,000 ids of its kind."""

    cancelled: int
    finished: int = Field(description="Already finished: left as they were.")
    refused: int = Field(description="The caller may not cancel them: left as they were.")
    not_found: int = Field(description="Ids that name no job.")
    cancelled_ids: list[str]
    refused_ids: list[str]
    not_found_ids: list[str]
    message: str
    next_page_token: str = Field(
        description="Set when the call stopped at its bound: send it as page_token to go on."
    )
    refusal: str = Field(description="Why the first refused job was refused.")


class _DeclaredSpecOut(_Out):
    """A job's spec: every JobSpec field (those not declared here: with_spec_fields)."""

    params_yaml: str = Field(description="The params as submitted (empty in list views).")
    num_csx: int
    num_steps: int
    mode: Mode
    labels: dict[str, str]
    priority: PriorityName
    model_dir: str
    max_restarts: int | None = Field(description="null: the cluster's default.")
    preemptible: bool = Field(description="false: never preempted (set by an admin).")
    queue: str = Field(default="default", description="The queue it was submitted to.")
    depends_on: list[str] = Field(
        default_factory=list, description='"condition:job" it waits for (full view).'
    )


if TYPE_CHECKING:
    SpecOut = _DeclaredSpecOut
else:
    SpecOut = with_spec_fields(_DeclaredSpecOut, "SpecOut", strict=False)


class AttemptOut(_Out):
    number: int
    scheduled_at: Moment
    started_at: Moment = Field(description="When it was RUNNING; null if it never got there.")
    ended_at: Moment
    systems: list[str]
    reason: str = Field(description="Why it ended.")
    ended_in: Phase = Field(description="QUEUED when requeued, else the job's final phase.")
    resumed_from: int = Field(description="The checkpoint step it began from (0: the start).")


class ProgressOut(_Out):
    step: int = 0
    num_steps: int = 0
    loss: float = 0.0
    steps_per_second: float = 0.0
    samples_per_second: float = 0.0
    reported_at: Moment = Field(default=None, description="The report's time; null: none yet.")
    checkpoint_step: int = Field(default=0, description="The newest checkpoint of the run.")
    resumed_from_step: int = Field(
        default=0, description="The checkpoint step this attempt resumed from (0: the start)."
    )
    learning_rate: float = Field(
        default=0.0, description="The learning rate of the step reported (0: not reported)."
    )
    eval_loss: float | None = Field(
        default=None, description="The newest evaluation's loss (eval, train_and_eval)."
    )
    eval_accuracy: float | None = Field(
        default=None, description="The newest evaluation's accuracy, a fraction of 1."
    )
    eval_samples: int = Field(
        default=0, description="How many samples the newest evaluation covered (0: none yet)."
    )


class ReplicaOut(_Out):
    name: str = Field(description="chief-0, cs2-0, memoryx-0, swarmx-0, ...")
    role: str
    index: int
    phase: ReplicaPhase
    node: str
    address: str
    pid: int
    exit_code: int | None = Field(description="None while the replica has not exited.")
    message: str
    log_tail: str
    data_plane: str = Field(
        default="",
        description="How the replica's data plane reaches its peers, as it said "
        "(`shared memory: swarmx-0; grpc: none`); empty until it has chosen.",
    )


class LeaseOut(_Out):
    lease_seconds: float = Field(description="Cancelled after this long without a heartbeat.")
    expires_at: Moment = Field(description="When the lease runs out unless renewed.")
    holder: str


class ArrayTaskOut(_Out):
    array_id: str = Field(description="The array's id: its tasks are <array_id>_<index>.")
    index: int
    cap: int = Field(description="The array's cap of tasks running at once (0: none).")


class ArrayRowOut(_Out):
    job_id: str
    index: int
    overrides: dict[str, str]
    phase: Phase
    reason: str
    reason_code: str
    step: int = Field(description="The last step it reached (0: none yet).")
    loss: float | None = Field(description="The loss at that step (null: no curve yet).")
    eval_loss: float | None = Field(description="Its last evaluation's loss (null: none).")
    eval_accuracy: float | None = Field(description="Its last evaluation's accuracy.")


class ArrayOut(_Out):
    array_id: str
    user: str
    cap: int = Field(description="At most this many tasks run at once (0: no cap).")
    tasks: list[ArrayRowOut] = Field(description="One row per task, sorted as asked.")


class HoldOut(_Out):
    kind: str = Field(description="user, or admin (only an admin releases it).")
    by: str = Field(description="Who put the hold.")
    suspended: bool = Field(description="It suspended the job while it ran (csctl resume).")


class JobOut(_Out):
    id: str = Field(description="wsjob-<id>")
    user: str
    spec: SpecOut
    execution_strategy: str = Field(
        default="",
        description="pipeline (one CS-2 holds the model: no MemoryX, no SwarmX) or "
        "weight_streaming, as its params chose; empty in list views.",
    )
    phase: Phase
    reason: str = Field(description="Why the job ended (terminal phases).")
    pending_reason: str = Field(description="Why a QUEUED job waits (in lists too).")
    reason_code: str = Field(
        default="",
        description="The code of `reason` (e.g. CancelledByUser, ReplicaFailed; empty: none).",
    )
    pending_reason_code: str = Field(
        default="",
        description="The code of `pending_reason` (e.g. Capacity, BehindHigherPriority, Quota; "
        "empty: none). In lists too, read fresh every call.",
    )
    queue_position: int = Field(
        description="1 = next to run in its queue; 0 when not queued. In lists too, read fresh "
        "every call."
    )
    estimated_start: Moment = Field(
        default=None,
        description="A queued job's estimated start (null when it cannot be estimated): "
        "an estimate from the running jobs' steps left and rates and the jobs ahead of it. In "
        "lists too, read fresh every call.",
    )
    systems: list[str] = Field(description="CS-2 systems reserved for the job.")
    attempt: int = Field(
        default=0, description="Runs begun (0 while never scheduled); more after restarts."
    )
    restarts: int = Field(default=0, description="Times the job went back to the queue.")
    attempts: list[AttemptOut] = Field(
        default_factory=list, description="The attempts that ended, first first (full view)."
    )
    dependents: list[str] = Field(
        default_factory=list, description="Jobs that wait for this one (full view)."
    )
    progress: ProgressOut
    created_at: Moment
    updated_at: Moment
    started_at: Moment = Field(description="When it first ran; null: not yet.")
    finished_at: Moment = Field(description="When it ended; null: not yet.")
    replicas: list[ReplicaOut] = Field(description="Empty in list views.")
    lease: LeaseOut | None = Field(description="None for a detached job.")
    array: ArrayTaskOut | None = Field(
        default=None, description="Its array, when it is an array's task (--array, --sweep)."
    )
    hold: HoldOut | None = Field(
        default=None,
        description="Its hold (null: not held): a held queued job keeps its place and waits "
        "until released.",
    )


class JobListOut(_Out):
    jobs: list[JobOut] = Field(
        description="Newest first; summaries without params or replicas, with the queue "
        "position and pending reason of each queued job."
    )
    next_page_token: str = Field(description="Pass as page_token for the next page; empty = end.")


class HoldActionOut(_Out):
    job: JobOut
    changed: bool = Field(description="False when nothing changed (already held, not held).")
    message: str


class CancelOut(_Out):
    job: JobOut
    changed: bool = Field(description="False when the job was already terminal.")
    message: str


class EventOut(_Out):
    job_id: str
    kind: EventKind
    seq: int = Field(description="Order of phase events; 0 for progress events.")
    time: Moment
    from_phase: Phase | None
    to_phase: Phase | None
    reason: str
    progress: ProgressOut | None


class EventListOut(_Out):
    events: list[EventOut]


class ErrorDetail(_Out):
    code: str = Field(description="invalid_spec, not_found, conflict, ... (stable, for programs)")
    message: str = Field(description="A sentence saying what went wrong and what to do.")
    field: str | None = Field(default=None, description="The request field at fault, if any.")


class ErrorOut(_Out):
    error: ErrorDetail


class StatusOut(_Out):
    status: str
    reason: str | None = None


class ReadyOut(StatusOut):
    # Found at start, not making the coordinator unready, but failing jobs later: e.g. a pool
    # whose largest job the cluster's nodes cannot hold.
    warnings: list[str] = []


def progress_out(p: Progress) -> ProgressOut:
    return ProgressOut.model_validate(progress_document(p))


def job_out(job: Job) -> JobOut:
    """The job's document (domain/job_document.py, csctl's too) as a JobOut: a key the models
    lack is an error (extra="forbid"), so the two cannot drift."""
    return JobOut.model_validate(job_document(job))


def lease_out(lease: Lease) -> LeaseOut:
    return LeaseOut.model_validate(lease_document(lease))


def event_out(ev: JobEvent) -> EventOut:
    return EventOut(
        job_id=ev.job_id,
        kind=ev.kind,
        seq=ev.seq,
        time=utc_moment(ev.time),
        from_phase=ev.from_phase,
        to_phase=ev.to_phase,
        reason=ev.reason,
        progress=progress_out(ev.progress) if ev.progress is not None else None,
    )
