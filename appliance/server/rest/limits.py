"""/api/v1/limits: the caller's per-user limits and what they use of them (as gRPC GetLimits
and `csctl get limits`); admins may name another user."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query
from pydantic import BaseModel, Field

from appliance.domain.auth import Principal
from appliance.domain.limits import LimitsReport
from appliance.server.rest.auth import CallerDependency
from appliance.server.rest.errors import ERROR_RESPONSES
from appliance.services.limits import Limits


class CapsOut(BaseModel):
    """A user's caps; null is unlimited."""

    streams: int | None = Field(description="Long-lived streams open at once.")
    requests_per_second: float | None = Field(description="Requests refilled per second.")
    burst: int = Field(description="Requests at most in a burst (the bucket's size).")
    queued_jobs: int | None = Field(description="Jobs waiting to run (not yet RUNNING).")
    running_systems: int | None = Field(
        default=None, description="CS-2 systems the user's admitted jobs may hold at once."
    )


class LimitsOut(BaseModel):
    user: str
    enabled: bool = Field(description="False: per-user limits are off on this appliance.")
    caps: CapsOut
    streams_open: int
    requests_left: float = Field(description="Tokens in the user's bucket now.")
    queued_jobs: int = Field(description="The user's jobs waiting to run, in all queues.")
    queued_by_queue: dict[str, int]
    queue_caps: dict[str, int] = Field(
        description="Queues with a cap of jobs one user may have waiting in them."
    )
    running_systems: int = Field(
        default=0, description="CS-2 systems the user's admitted jobs hold now."
    )


def limits_out(report: LimitsReport) -> LimitsOut:
    caps = report.caps
    return LimitsOut(
        user=report.user,
        enabled=report.enabled,
        caps=CapsOut(
            streams=caps.streams,
            requests_per_second=caps.requests_per_second,
            burst=caps.burst,
            queued_jobs=caps.queued_jobs,
            running_systems=caps.running_systems,
        ),
        streams_open=report.streams_open,
        requests_left=round(report.tokens_left, 2),
        queued_jobs=sum(report.waiting.values()),
        queued_by_queue=dict(report.waiting),
        queue_caps=dict(report.queue_caps),
        running_systems=report.running_systems,
    )


def limits_router(limits: Limits, caller: CallerDependency) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["cluster"], responses=ERROR_RESPONSES)
    authenticated = Depends(caller)

    @router.get("/limits", response_model=LimitsOut)
    async def get_limits(
        user: Annotated[
            str, Query(description="Another user's limits (admins).", max_length=253)
        ] = "",
        x_appliance_user: Annotated[str | None, Header(include_in_schema=False)] = None,
        by: Principal | None = authenticated,
    ) -> LimitsOut:
        """The caller's per-user limits (streams, request rate, queued jobs) and their use."""
        return limits_out(await limits.report_for(by, x_appliance_user, user))

    return router
