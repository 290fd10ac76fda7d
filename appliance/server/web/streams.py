"""The dashboard's live feeds, Server-Sent Events: a `changed` event whenever what a list
shows changed (the pages re-fetch their live part), a job's events (the REST stream's frames),
and a job's log lines followed until it ends. Each re-checks its session before every frame and
keep-alive and every STREAM_RECHECK_SECONDS (server/streams.py `rechecked`): a logout or an
expired or revoked token ends it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import StreamingResponse

from appliance.domain.auth import Principal
from appliance.server.rest.events import MEDIA_TYPE, sse_stream
from appliance.server.rest.limiting import holding, open_stream
from appliance.server.web.render import PREFIX, HtmlRoute
from appliance.server.web.session import Sessions
from appliance.services.jobs import JobService
from appliance.services.limits import Limits
from appliance.services.logs import LogService

JobId = Annotated[str, Path(max_length=64)]
MAX_LOG_LINES = 200  # lines per frame: a burst of log is sent in parts
LOG_TAIL = 500  # of what each replica wrote so far, the lines sent: dashboard.js keeps 500
CHANGED = b"event: changed\ndata: {}\n\n"
LOG_END = b"event: end\ndata: {}\n\n"
NO_CACHE = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def streams_router(
    jobs: JobService, logs: LogService, sessions: Sessions, limits: Limits | None = None
) -> APIRouter:
    router = APIRouter(prefix=PREFIX, route_class=HtmlRoute, include_in_schema=False)
    caller = Depends(sessions.caller)

    @router.get("/stream")
    async def changes(request: Request, by: Principal | None = caller) -> StreamingResponse:
        """`changed` after each change a list shows (coalesced by the use case)."""
        frames = sse_stream(jobs.changes(), _recheck(sessions, request), frame=lambda _: CHANGED)
        return _sse(_held(limits, by, frames))

    @router.get("/jobs/{job_id}/events")
    async def job_events(
        request: Request, job_id: JobId, by: Principal | None = caller
    ) -> StreamingResponse:
        await jobs.get(job_id)  # 404 before the stream starts
        after = request.headers.get("last-event-id", "")
        seq = int(after) if after.isdigit() and len(after) < 19 else 0
        frames = sse_stream(jobs.watch(job_id, seq), _recheck(sessions, request))
        return _sse(_held(limits, by, frames))

    @router.get("/jobs/{job_id}/logs")
    async def job_logs(
        request: Request, job_id: JobId, by: Principal | None = caller
    ) -> StreamingResponse:
        """Each replica's last LOG_TAIL lines, then every new one until the job ends."""
        await jobs.get(job_id)
        chunks = logs.read(job_id, follow=True, by=by, tail=LOG_TAIL)
        frames = sse_stream(chunks, _recheck(sessions, request), frame=_log_frames, end=LOG_END)
        return _sse(_held(limits, by, frames))

    return router


def _held(
    limits: Limits | None, by: Principal | None, frames: AsyncIterator[bytes]
) -> AsyncIterator[bytes]:
    """The feed, holding one of its user's stream slots while it lasts (a refusal is an
    error page, 429: the browser's EventSource tries again later)."""
    if limits is None:
        return frames
    return holding(open_stream(limits, by, None, door="web"), frames)


def _sse(frames: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(frames, media_type=MEDIA_TYPE, headers=NO_CACHE)


def _recheck(sessions: Sessions, request: Request) -> Callable[[], Awaitable[object]]:
    """What a feed runs before each frame: the request's session, still valid."""
    return lambda: sessions.caller(request)


def _log_frames(chunk: tuple[str, list[str]]) -> bytes:
    replica, lines = chunk
    frames = []
    for start in range(0, len(lines), MAX_LOG_LINES):
        data = json.dumps({"replica": replica, "lines": lines[start : start + MAX_LOG_LINES]})
        frames.append(f"event: log\ndata: {data}\n\n")
    return "".join(frames).encode()
