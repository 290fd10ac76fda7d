"""/api/v1/jobs: thin routes over JobService (the same use cases the gRPC servicer calls)."""

from __future__ import annotations

import dataclasses
import re
from typing import Annotated

from fastapi import APIRouter, Body, Depends, Header, Path, Query, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from appliance.domain.array_view import collapse_queued
from appliance.domain.arrays import checked_array_id
from appliance.domain.auth import ANONYMOUS_USER, Principal
from appliance.domain.errors import InvalidSpec
from appliance.domain.listing import DEFAULT_LIMIT, MAX_LIMIT, JobQuery
from appliance.domain.phases import Phase
from appliance.domain.reasons import Reason, parse_codes
from appliance.domain.selectors import parse_selectors
from appliance.domain.timestamps import utc_moment
from appliance.server.rest.auth import CallerDependency
from appliance.server.rest.errors import ERROR_RESPONSES
from appliance.server.rest.events import MEDIA_TYPE, sse_stream
from appliance.server.rest.limiting import holding, open_stream
from appliance.server.rest.models import (
    CancelJobsOut,
    CancelOut,
    EventListOut,
    JobListOut,
    JobOut,
    event_out,
    job_out,
)
from appliance.server.rest.requests import CancelIn, CancelJobsIn, JobSubmitIn
from appliance.services.bulk_cancels import BulkCancel
from appliance.services.jobs import JobService
from appliance.services.limits import Limits

JobId = Annotated[str, Path(description="The job's name, wsjob-<id>.", max_length=64)]


def _json(model: BaseModel, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """Serialize in pydantic-core (the route's response_model documents the shape)."""
    return Response(model.model_dump_json(), status, headers, media_type="application/json")


def jobs_router(
    jobs: JobService,
    bulk_cancels: BulkCancel,
    caller: CallerDependency,
    limits: Limits | None = None,
) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["jobs"], responses=ERROR_RESPONSES)
    authenticated = Depends(caller)  # the caller, or None while authentication is off
    # Summaries rendered once per version; one page of the largest size stays cached.
    listing = jobs.listing(job_out, max_cached=MAX_LIMIT)

    @router.post("/jobs", status_code=201, response_model=JobOut)
    async def submit_job(body: JobSubmitIn, by: Principal | None = authenticated) -> Response:
        """Submit a wsjob. It is validated like every other door (a request that can never fit
        the cluster is rejected, naming the field) and persisted QUEUED."""
        spec = await jobs.validate(**body.spec_fields())
        job = await jobs.submit(spec, body.user or ANONYMOUS_USER, by=by, door="rest")
        return _json(job_out(job), 201, {"Location": f"/api/v1/jobs/{job.id}"})

    @router.get("/jobs", response_model=JobListOut)
    async def list_jobs(
        all: Annotated[bool, Query(description="Include finished jobs.")] = False,
        user: Annotated[str, Query(description="Only this user's jobs.", max_length=253)] = "",
        label: Annotated[
            list[str],
            Query(
                description="Label selectors as kubectl writes them: k=v, k!=v, 'k in (a,b)', "
                "'k notin (a,b)', k, !k; comma-separate or repeat (all must match).",
            ),
        ] = [],  # noqa: B006 - FastAPI copies defaults per request
        phase: Annotated[
            list[Phase], Query(description="Only jobs in these phases (repeatable).")
        ] = [],  # noqa: B006
        reason: Annotated[
            list[str],
            Query(
                description="Only jobs whose reason_code or pending_reason_code is one of these "
                "(case-insensitive; comma-separate or repeat); finished jobs too.",
                max_length=1024,
            ),
        ] = [],  # noqa: B006
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Page size.")] = DEFAULT_LIMIT,
        page_token: Annotated[
            str, Query(description="next_page_token of the previous page.", max_length=512)
        ] = "",
        array: Annotated[
            str, Query(description="Only this array's tasks (wsjob-…).", max_length=64)
        ] = "",
        expand: Annotated[
            bool,
            Query(
                description="Every queued task of an array as its own job; otherwise a page "
                "shows an array's queued tasks as one, named wsjob-…_[3-31%4] (as squeue does)."
            ),
        ] = False,
        by: Principal | None = authenticated,
    ) -> Response:
        """List jobs newest first, one page at a time (active jobs only unless `all`, or unless
        `phase` names a finished phase). Summaries leave out the params and the replicas."""
        query = JobQuery(
            include_terminal=all,
            user=user,
            selector=parse_selectors(label, field="label"),
            limit=limit,
            page_token=page_token,
            phases=frozenset(phase),
            reasons=parse_codes(reason),
            array=checked_array_id(array) if array else "",
        )
        listed, token = await listing.page(query)
        found = [
            out.model_copy(update=_waiting(position, reason, start)) if position else out
            for out, position, reason, start in listed
        ]
        if not expand:
            found = collapse_queued(found, _queued_task, _renamed)
        return _json(JobListOut(jobs=found, next_page_token=token))

    @router.get("/jobs/{job_id}", response_model=JobOut)
    async def get_job(job_id: JobId, by: Principal | None = authenticated) -> Response:
        """A job's full status: spec with params, phase and reasons, progress, replicas."""
        return _json(job_out(await jobs.get(job_id, by=by)))

    @router.post("/jobs/{job_id}/cancel", response_model=CancelOut)
    async def cancel_job(
        job_id: JobId,
        by: Principal | None = authenticated,
        body: Annotated[CancelIn | None, Body()] = None,
    ) -> Response:
        """Cancel a job. Idempotent: a finished job is left as it is (`changed` is false)."""
        job, changed, message = await jobs.cancel(job_id, body.reason if body else "", by=by)
        return _json(CancelOut(job=job_out(job), changed=changed, message=message))

    @router.post("/jobs:cancel", response_model=CancelJobsOut)
    async def cancel_jobs(body: CancelJobsIn, by: Principal | None = authenticated) -> Response:
        """Cancel many jobs in one call (like `scancel -u`): every active job a selection
        matches, or the jobs named by id. Jobs the caller may not cancel are left as they
        are and counted as refused."""
        result = await bulk_cancels.cancel(body.selection(), by=by)
        return _json(CancelJobsOut.model_validate(dataclasses.asdict(result)))

    @router.get("/jobs/{job_id}/events", response_model=EventListOut)
    async def get_job_events(job_id: JobId, by: Principal | None = authenticated) -> Response:
        """Every phase change of the job so far, oldest first, with time and reason."""
        events = await jobs.events(job_id)
        return _json(EventListOut(events=[event_out(e) for e in events]))

    @router.get(
        "/jobs/{job_id}/events/stream",
        response_class=StreamingResponse,
        responses={
            200: {
                "description": "Server-Sent Events: `phase` and `progress` events whose data "
                "is an EventOut; the stream ends when the job is terminal.",
                "content": {MEDIA_TYPE: {"schema": {"type": "string"}}},
            }
        },
    )
    async def stream_job_events(
        job_id: JobId,
        after_seq: Annotated[
            int, Query(ge=0, le=2**62, description="Only phase events after this seq.")
        ] = 0,
        last_event_id: Annotated[
            str | None, Header(description="SSE resume: the last `id` seen.", max_length=20)
        ] = None,
        authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
        x_appliance_user: Annotated[str | None, Header(include_in_schema=False)] = None,
        by: Principal | None = authenticated,
    ) -> StreamingResponse:
        """Recorded events, then live ones, until the job is terminal (like gRPC WatchJob). A
        token revoked meanwhile ends the stream with an `error` event. A stream holds one of
        its user's stream slots while it lasts (429 when they hold their limit)."""
        after = max(after_seq, _resume_seq(last_event_id))
        await jobs.get(job_id)  # unknown jobs fail with 404 before the stream starts
        stream = sse_stream(jobs.watch(job_id, after), lambda: caller(authorization))
        if limits is not None:
            stream = holding(open_stream(limits, by, x_appliance_user), stream)
        return StreamingResponse(
            stream, media_type=MEDIA_TYPE, headers={"Cache-Control": "no-cache"}
        )

    return router


def _queued_task(job: JobOut) -> tuple[str, int, int] | None:
    task = job.array
    if task is None or job.phase is not Phase.QUEUED:
        return None
    return task.array_id, task.index, task.cap


def _renamed(job: JobOut, name: str) -> JobOut:
    return job.model_copy(update={"id": name})


def _resume_seq(last_event_id: str | None) -> int:
    if not last_event_id:
        return 0
    if not re.fullmatch(r"[0-9]{1,18}", last_event_id.strip()):
        raise InvalidSpec("Last-Event-ID must be a phase event's seq", field="Last-Event-ID")
    return int(last_event_id)


def _waiting(position: int, reason: Reason | None, start: float) -> dict[str, object]:
    """A listed queued job's fresh queue position, its reason when the scheduler gave one, and
    its estimated start."""
    fresh: dict[str, object] = {"queue_position": position, "estimated_start": utc_moment(start)}
    if reason is not None:
        fresh["pending_reason"] = reason.message
        fresh["pending_reason_code"] = reason.code_text
    return fresh
