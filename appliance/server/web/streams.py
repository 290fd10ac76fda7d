"""The dashboard's live feeds, Server-Sent Events: a `changed` event whenever what a list
shows changed (the pages re-fetch their live part), a job's events (the REST stream's frames),
and a job's log lines followed until it ends."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import StreamingResponse

from appliance.domain.auth import Principal
from appliance.domain.errors import ApplianceError
from appliance.server.rest.events import MEDIA_TYPE, error_frame, sse_stream
from appliance.server.web.render import PREFIX, HtmlRoute
from appliance.server.web.session import Sessions
from appliance.services.jobs import JobService
from appliance.services.logs import LogService

JobId = Annotated[str, Path(max_length=64)]
MAX_LOG_LINES = 200  # lines per frame: a burst of log is sent in parts
CHANGED = b"event: changed\ndata: {}\n\n"
NO_CACHE = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def streams_router(jobs: JobService, logs: LogService, sessions: Sessions) -> APIRouter:
    router = APIRouter(prefix=PREFIX, route_class=HtmlRoute, include_in_schema=False)
    caller = Depends(sessions.caller)

    @router.get("/stream")
    async def changes(request: Request, by: Principal | None = caller) -> StreamingResponse:
        """`changed` after each change a list shows (coalesced by the use case)."""
        recheck = lambda: sessions.caller(request)  # noqa: E731 - a revoked token ends it
        return _sse(sse_stream(jobs.changes(), recheck, frame=lambda _: CHANGED))

    @router.get("/jobs/{job_id}/events")
    async def job_events(
        request: Request, job_id: JobId, by: Principal | None = caller
    ) -> StreamingResponse:
        await jobs.get(job_id)  # 404 before the stream starts
        after = request.headers.get("last-event-id", "")
        seq = int(after) if after.isdigit() and len(after) < 19 else 0
        return _sse(sse_stream(jobs.watch(job_id, seq), lambda: sessions.caller(request)))

    @router.get("/jobs/{job_id}/logs")
    async def job_logs(
        request: Request, job_id: JobId, by: Principal | None = caller
    ) -> StreamingResponse:
        await jobs.get(job_id)
        return _sse(_log_frames(logs.read(job_id, follow=True, by=by)))

    return router


def _sse(frames: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(frames, media_type=MEDIA_TYPE, headers=NO_CACHE)


async def _log_frames(chunks: AsyncIterator[tuple[str, list[str]]]) -> AsyncIterator[bytes]:
    try:
        async for replica, lines in chunks:
            for start in range(0, len(lines), MAX_LOG_LINES):
                part = lines[start : start + MAX_LOG_LINES]
                data = json.dumps({"replica": replica, "lines": part})
                yield f"event: log\ndata: {data}\n\n".encode()
    except ApplianceError as exc:
        yield error_frame(exc)
        return
    yield b"event: end\ndata: {}\n\n"
