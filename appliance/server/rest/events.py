"""Server-Sent Events framing of a job's event stream (JobService.watch).

Phase events carry their sequence number as the SSE `id`, so a client that reconnects with
`Last-Event-ID` resumes after the last phase event it saw. Idle streams get a comment line
every `keepalive` seconds so proxies do not cut them.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from appliance.domain.errors import ApplianceError
from appliance.domain.job import JobEvent
from appliance.server.rest.errors import status_for
from appliance.server.rest.models import ErrorDetail, ErrorOut, event_out
from appliance.server.streams import Idle, rechecked

log = logging.getLogger(__name__)

KEEPALIVE_SECONDS = 15.0
MEDIA_TYPE = "text/event-stream"

T = TypeVar("T")


def sse_frame(event: JobEvent) -> bytes:
    lines = []
    if event.seq:
        lines.append(f"id: {event.seq}")
    lines.append(f"event: {event.kind.value}")
    lines.append("data: " + event_out(event).model_dump_json())
    return ("\n".join(lines) + "\n\n").encode()


def error_frame(exc: Exception) -> bytes:
    if isinstance(exc, ApplianceError):
        detail = ErrorDetail(code=status_for(exc)[1], message=exc.message, field=exc.field)
    else:
        log.exception("event stream failed", exc_info=exc)
        detail = ErrorDetail(code="internal", message="internal error; see the coordinator's log")
    return b"event: error\ndata: " + ErrorOut(error=detail).model_dump_json().encode() + b"\n\n"


async def sse_stream(
    events: AsyncIterator[T],
    recheck: Callable[[], Awaitable[object]] | None = None,
    keepalive: float = KEEPALIVE_SECONDS,
    frame: Callable[[T], bytes] = sse_frame,  # type: ignore[assignment]
    end: bytes = b"",
) -> AsyncIterator[bytes]:
    """Frames of `events` (a job's, by default) until it ends (the job is terminal: then
    `end`) or the client goes away. `recheck` runs before each frame and each keep-alive and
    at least every STREAM_RECHECK_SECONDS (server/streams.py): it raises (an expired or revoked
    token) to end the stream with an error frame."""
    try:
        async for event in rechecked(events, recheck, keepalive):
            yield b": keep-alive\n\n" if event is Idle.TICK else frame(event)
    except Exception as exc:  # headers are sent: report it in the stream, then end it
        yield error_frame(exc)
        return
    if end:
        yield end
