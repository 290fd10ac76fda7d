"""Queues and usage: list the queues, an admin's definition or deletion of one, and usage
accounting. Thin routes over the services shared with gRPC."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Response
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from appliance.domain.auth import Principal
from appliance.domain.queues import MAX_GROUPS, MAX_WEIGHT, MIN_WEIGHT, USER_CAPS, QueueStatus
from appliance.domain.time_limits import MAX_TIME_LIMIT_CHARS
from appliance.domain.timestamps import utc_moment
from appliance.domain.usage import UsageBy, UsageRow
from appliance.server.rest.auth import CallerDependency
from appliance.server.rest.errors import ERROR_RESPONSES
from appliance.server.rest.models import Moment
from appliance.services.queues import QueueService
from appliance.services.usage import UsageService

QueueName = Annotated[
    str, Path(description="A queue name (lowercase letters, digits, '-').", max_length=63)
]
# Bytes or a size such as "32GiB": bounded and parsed by the domain (domain/queues.py).
Size = int | str
Cap = Annotated[str, StringConstraints(max_length=16)]  # "unlimited", or a number as text
# Seconds, or a limit as Slurm writes one ("2:00:00"): bounded and parsed by the domain
# (domain/time_limits.py).
TimeLimit = (
    Annotated[int, Field(ge=0, strict=True)]
    | Annotated[str, StringConstraints(max_length=MAX_TIME_LIMIT_CHARS)]
)


class QueueOut(BaseModel):
    name: str
    quota_systems: int = Field(description="Its nominal quota of CS-2 systems.")
    quota_memoryx_bytes: int = Field(description="Its nominal quota of MemoryX bytes.")
    systems: int | None = Field(description="As defined (null: the default queue's rest).")
    memoryx_bytes: int | None = Field(description="As defined (null: in step with systems).")
    weight: float = Field(description="Fair-share weight.")
    borrow_systems: int | None = Field(description="Most it may borrow (null: no limit).")
    borrow_memoryx_bytes: int | None = Field(description="Most it may borrow (null: no limit).")
    lend: bool = Field(description="It lends its idle quota to other queues.")
    groups: list[str] = Field(description="Who may submit (empty: anyone).")
    source: str = Field(description="file, admin or builtin.")
    updated_by: str
    updated_at: Moment
    used_systems: int
    used_memoryx_bytes: int
    borrowed_systems: int = Field(description="Systems it holds beyond its quota.")
    lent_systems: int = Field(description="Systems of its idle quota other queues hold.")
    pending: int
    running: int
    share: float = Field(description="Its part (0..1) of the cohort's recent usage.")
    weighted_share: float = Field(description="Orders the queues that borrow: lowest first.")
    max_running_jobs_per_user: int | None = Field(
        default=None, description="Admitted jobs one user may have in it (null: no cap)."
    )
    max_queued_jobs_per_user: int | None = Field(
        default=None, description="Jobs one user may have waiting to run in it (null: no cap)."
    )
    max_systems_per_user: int | None = Field(
        default=None, description="CS-2 systems one user's jobs in it may hold (null: no cap)."
    )
    default_time_limit: int | None = Field(
        default=None, description="A job's time limit when it gives none, seconds (null: none)."
    )
    max_time_limit: int | None = Field(
        default=None, description="The most time limit a job may ask for, seconds (null: none)."
    )


class QueueListOut(BaseModel):
    queues: list[QueueOut]


class QueueIn(BaseModel):
    """The fields to set (the others are kept; a new queue gets the defaults)."""

    model_config = ConfigDict(extra="forbid")

    systems: Annotated[int, Field(ge=0, strict=True)] | None = None
    memoryx: Size | None = Field(default=None, description='Bytes or a size such as "32GiB".')
    weight: float | None = Field(
        default=None, description=f"Fair-share weight, {MIN_WEIGHT:g} to {MAX_WEIGHT:g}."
    )
    borrow_systems: Annotated[int, Field(ge=0, strict=True)] | str | None = Field(
        default=None, description='Most systems it may borrow, or "unlimited".'
    )
    borrow_memoryx: Size | None = Field(default=None, description='A size, or "unlimited".')
    lend: bool | None = None
    groups: list[Annotated[str, StringConstraints(max_length=253)]] | None = Field(
        default=None, max_length=MAX_GROUPS, description="Who may submit ([]: anyone)."
    )
    # Checked by the domain (domain/queues.py), which names the field of a bad value.
    max_running_jobs_per_user: Annotated[int, Field(strict=True)] | Cap | None = Field(
        default=None, description='Admitted jobs one user may have in it, or "unlimited".'
    )
    max_queued_jobs_per_user: Annotated[int, Field(strict=True)] | Cap | None = Field(
        default=None, description='Jobs one user may have waiting in it, or "unlimited".'
    )
    max_systems_per_user: Annotated[int, Field(strict=True)] | Cap | None = Field(
        default=None, description='CS-2 systems one user\'s jobs in it may hold, or "unlimited".'
    )
    default_time_limit: TimeLimit | None = Field(
        default=None, description='A job\'s limit when it gives none ("2:00:00"), or "unlimited".'
    )
    max_time_limit: TimeLimit | None = Field(
        default=None, description='The most a job may ask for ("1-00:00:00"), or "unlimited".'
    )


class UsageRowOut(BaseModel):
    key: str = Field(description="The user, group or queue.")
    system_hours: float
    memoryx_gib_hours: float
    succeeded: int
    failed: int
    cancelled: int
    timed_out: int = 0
    wait_p50_seconds: float
    wait_p95_seconds: float
    preemptions: int
    restarts: int
    attempts: int = Field(description="Attempts scheduled in the window.")


class UsageOut(BaseModel):
    since: Moment
    until: Moment
    by: UsageBy
    rows: list[UsageRowOut]


def queues_router(
    queues: QueueService, usage: UsageService, caller: CallerDependency
) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["queues"], responses=ERROR_RESPONSES)
    authenticated = Depends(caller)  # the caller, or None while authentication is off

    @router.get("/queues", response_model=QueueListOut)
    async def list_queues(by: Principal | None = authenticated) -> QueueListOut:
        """Every queue: quota, what it holds, borrows and lends, its jobs and fair share."""
        return QueueListOut(queues=[queue_out(q) for q in await queues.list()])

    @router.put("/queues/{name}", response_model=QueueOut)
    async def set_queue(
        name: QueueName, body: QueueIn, by: Principal | None = authenticated
    ) -> QueueOut:
        """Admins: create a queue, or change the fields given."""
        fields: dict[str, Any] = body.model_dump(exclude_unset=True)
        spec = await queues.set(name, fields, by=by)
        return queue_out(await queues.status(spec.name))

    @router.delete("/queues/{name}", status_code=204, response_class=Response)
    async def delete_queue(name: QueueName, by: Principal | None = authenticated) -> Response:
        """Admins: delete a queue no job waits or runs in."""
        await queues.delete(name, by=by)
        return Response(status_code=204)

    @router.get("/usage", response_model=UsageOut)
    async def get_usage(
        since: Annotated[
            str, Query(max_length=40, description="30d, 12h, a date, Unix seconds; empty: 30d")
        ] = "",
        until: Annotated[str, Query(max_length=40, description="Like since; empty: now")] = "",
        group_by: Annotated[UsageBy, Query(alias="by")] = UsageBy.USER,
        by: Principal | None = authenticated,
    ) -> UsageOut:
        """Usage accounting per user, group or queue over a window (all users' usage)."""
        query, rows = await usage.report(since, until, group_by.value)
        return UsageOut(
            since=utc_moment(query.since),
            until=utc_moment(query.until),
            by=query.by,
            rows=[_row(r) for r in rows],
        )

    return router


def _row(row: UsageRow) -> UsageRowOut:
    return UsageRowOut(**dataclasses.asdict(row))


def queue_out(status: QueueStatus) -> QueueOut:
    spec, quota = status.spec, status.quota
    return QueueOut(
        name=spec.name, quota_systems=quota.systems, quota_memoryx_bytes=quota.memoryx_bytes,
        systems=spec.systems, memoryx_bytes=spec.memoryx_bytes, weight=spec.weight,
        borrow_systems=spec.borrow_systems, borrow_memoryx_bytes=spec.borrow_memoryx_bytes,
        lend=spec.lend, groups=list(spec.groups), source=spec.source.value,
        updated_by=spec.updated_by, updated_at=utc_moment(spec.updated_at),
        used_systems=status.used_systems, used_memoryx_bytes=status.used_memoryx_bytes,
        borrowed_systems=status.borrowed_systems, lent_systems=status.lent_systems,
        pending=status.pending, running=status.running, share=status.share,
        weighted_share=status.weighted_share, **{cap: getattr(spec, cap) for cap in USER_CAPS},
        default_time_limit=spec.default_time_limit, max_time_limit=spec.max_time_limit,
    )  # fmt: skip
