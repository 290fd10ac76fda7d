"""POST a job's hold, release, suspend and resume (#37): thin routes over services/holds.py."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from appliance.domain.auth import Principal
from appliance.server.rest.auth import CallerDependency
from appliance.server.rest.controls import JobId
from appliance.server.rest.errors import ERROR_RESPONSES
from appliance.server.rest.models import HoldActionOut, job_out
from appliance.services.holds import HoldOutcome, HoldService


def holds_router(holds: HoldService, caller: CallerDependency) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["jobs"], responses=ERROR_RESPONSES)
    authenticated = Depends(caller)  # the caller, or None while authentication is off

    @router.post("/jobs/{job_id}/hold", response_model=HoldActionOut)
    async def hold_job(job_id: JobId, by: Principal | None = authenticated) -> HoldActionOut:
        """Hold a queued job: it keeps its place and waits until released."""
        return _out(await holds.hold(job_id, by=by))

    @router.post("/jobs/{job_id}/release", response_model=HoldActionOut)
    async def release_job(job_id: JobId, by: Principal | None = authenticated) -> HoldActionOut:
        """Release a held job (only an admin releases an admin's hold)."""
        return _out(await holds.release(job_id, by=by))

    @router.post("/jobs/{job_id}/suspend", response_model=HoldActionOut)
    async def suspend_job(job_id: JobId, by: Principal | None = authenticated) -> HoldActionOut:
        """Suspend a running job: it checkpoints, gives its systems back and waits held."""
        return _out(await holds.suspend(job_id, by=by))

    @router.post("/jobs/{job_id}/resume", response_model=HoldActionOut)
    async def resume_job(job_id: JobId, by: Principal | None = authenticated) -> HoldActionOut:
        """Resume a suspended job: it goes on from its checkpoint."""
        return _out(await holds.release(job_id, by=by, resume=True))

    return router


def _out(outcome: HoldOutcome) -> HoldActionOut:
    return HoldActionOut(
        job=job_out(outcome.job), changed=outcome.changed, message=outcome.message
    )
