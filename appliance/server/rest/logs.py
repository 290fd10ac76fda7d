"""/api/v1/jobs/{id}/logs: a job's replica logs as text, optionally followed (as csctl logs -f
over gRPC GetJobLogs: the same LogService, the same authorization). A followed log re-checks
its caller as the event stream does (server/streams.py `rechecked`): a revoked token ends it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path, Query
from fastapi.responses import StreamingResponse

from appliance.domain.auth import Principal
from appliance.domain.display import printable
from appliance.domain.errors import ApplianceError
from appliance.server.rest.auth import CallerDependency
from appliance.server.rest.errors import ERROR_RESPONSES
from appliance.server.rest.limiting import holding, open_stream
from appliance.server.streams import Idle, rechecked
from appliance.services.job_controls import check_job_id
from appliance.services.limits import Limits
from appliance.services.logs import LogService

log = logging.getLogger(__name__)

MAX_TAIL_LINES = 100_000
MEDIA_TYPE = "text/plain; charset=utf-8"

JobId = Annotated[str, Path(description="The job's name, wsjob-<id>.", max_length=64)]


def logs_router(
    logs: LogService, caller: CallerDependency, limits: Limits | None = None
) -> APIRouter:
    router = APIRouter(prefix="/api/v1", tags=["jobs"], responses=ERROR_RESPONSES)
    authenticated = Depends(caller)

    @router.get(
        "/jobs/{job_id}/logs",
        response_class=StreamingResponse,
        responses={
            200: {
                "description": "The log lines, each prefixed with `[replica] ` unless `replica` "
                "is given; with `follow`, streamed until the job is terminal.",
                "content": {MEDIA_TYPE: {"schema": {"type": "string"}}},
            }
        },
    )
    async def get_job_logs(
        job_id: JobId,
        replica: Annotated[
            str,
            Query(
                description="Only this replica's log (chief-0, cs2-0, ...); empty: every "
                "replica's in turn.",
                max_length=64,
                pattern=r"^([a-z][a-z0-9]*-[0-9]{1,6})?$",
            ),
        ] = "",
        follow: Annotated[
            bool, Query(description="Keep sending new lines until the job is terminal.")
        ] = False,
        tail: Annotated[
            int | None,
            Query(
                ge=1,
                le=MAX_TAIL_LINES,
                description="Of what is written so far, only each replica's last N lines.",
            ),
        ] = None,
        authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
        x_appliance_user: Annotated[str | None, Header(include_in_schema=False)] = None,
        by: Principal | None = authenticated,
    ) -> StreamingResponse:
        """A job's replica logs (what `csctl logs` prints), with the authorization of gRPC
        GetJobLogs: the job's owner, their group, or an admin, while authentication is on. A
        followed log holds one of its user's stream slots (429 when they hold their limit)."""
        check_job_id(job_id)
        await logs.check(job_id, replica, by=by)  # an error is a status, before any line
        chunks = logs.read(job_id, replica, follow, by=by, tail=tail)
        body = _lines(chunks, lambda: caller(authorization), prefixed=not replica)
        if follow and limits is not None:
            body = holding(open_stream(limits, by, x_appliance_user), body)
        return StreamingResponse(
            body,
            media_type=MEDIA_TYPE,
            headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
        )

    return router


async def _lines(
    chunks: AsyncIterator[tuple[str, list[str]]],
    recheck: Callable[[], Awaitable[object]],
    *,
    prefixed: bool,
) -> AsyncIterator[bytes]:
    """The lines as text, one chunk per read; an error once the status is sent (the token
    revoked meanwhile) ends the body with a line saying it."""
    try:
        async for chunk in rechecked(chunks, recheck):
            if chunk is Idle.TICK:
                continue
            name, lines = chunk
            prefix = f"[{name}] " if prefixed else ""
            yield "".join(f"{prefix}{printable(line)}\n" for line in lines).encode()
    except ApplianceError as exc:
        yield f"error: {exc.message}\n".encode()
    except Exception:
        log.exception("log stream failed")
        yield b"error: internal error; see the coordinator's log\n"
