"""PATCH a job (priority, labels) and heartbeat its lease: thin routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel, ConfigDict, Field

from appliance.domain.auth import Principal
from appliance.domain.spec import Priority, validate_labels
from appliance.server.rest.auth import CallerDependency
from appliance.server.rest.errors import ERROR_RESPONSES
from appliance.server.rest.models import JobOut, LeaseOut, PriorityIn, job_out, lease_out
from appliance.services.jobs import JobService

JobId = Annotated[str, Path(description="The job's name, wsjob-<id>.", max_length=64)]


class LabelsPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    set: dict[str, str] = Field(default_factory=dict, description="Labels to add or change.")
    remove: list[str] = Field(default_factory=list, description="Label keys to remove.")


class JobPatchIn(BaseModel):
    """What to change; fields left out stay as they are."""

    model_config = ConfigDict(extra="forbid")

    priority: PriorityIn | None = Field(default=None, description="New queue priority.")
    labels: LabelsPatch | None = None


class HeartbeatIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    holder: str = Field(default="", max_length=300, description="Where the client runs.")


class HeartbeatOut(BaseModel):
    lease: LeaseOut | None
    keep_running: bool = Field(description="False once the job is terminal.")


def controls_router(jobs: JobService, caller: CallerDependency) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["jobs"], responses=ERROR_RESPONSES)
    authenticated = Depends(caller)  # the caller, or None while authentication is off

    @router.patch("/jobs/{job_id}", response_model=JobOut)
    async def patch_job(
        job_id: JobId, body: JobPatchIn, by: Principal | None = authenticated
    ) -> JobOut:
        """Change a job's priority (queued or running jobs; P0 is admin-only) and/or labels."""
        job = None
        if body.labels is not None:
            validate_labels(body.labels.set)  # before any write: all of the PATCH or none of it
        if body.priority is not None:
            job = await jobs.set_priority(job_id, Priority[body.priority.name], by=by)
        if body.labels is not None:
            job = await jobs.update_labels(job_id, body.labels.set, body.labels.remove, by=by)
        return job_out(job or await jobs.get(job_id, by=by))

    @router.post("/jobs/{job_id}/heartbeat", response_model=HeartbeatOut)
    async def heartbeat(
        job_id: JobId, body: HeartbeatIn, by: Principal | None = authenticated
    ) -> HeartbeatOut:
        """The submitting client is still there: extend the job's lease."""
        job = await jobs.renew_lease(job_id, body.holder, by=by)
        lease = lease_out(job.lease) if job.lease else None
        return HeartbeatOut(lease=lease, keep_running=not job.phase.terminal)

    return router
