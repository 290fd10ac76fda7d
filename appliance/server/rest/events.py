"""Server-Sent Events framing of a job's event stream (JobService.watch).

Phase events carry their sequence number as the SSE `id`, so a client that reconnects with
`Last-Event-ID` resumes after the last phase event it saw. Idle streams get a comment line
every `keepalive` seconds so proxies do not cut them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from appliance.domain.errors import ApplianceError
from appliance.domain.job import JobEvent
from appliance.server.rest.errors import status_for
from appliance.server.rest.models import ErrorDetail, ErrorOut, event_out

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
) -> AsyncIterator[bytes]:
    """Frames of `events` (a job's, by default) until it ends (the job is terminal) or the
    client goes away. `recheck` runs before each frame: it raises (a revoked token) to end
    the stream."""
    pending: asyncio.Future[T] = asyncio.ensure_future(anext(events))
    try:
        while True:
            done, _ = await asyncio.wait({pending}, timeout=keepalive)
            if not done:
                yield b": keep-alive\n\n"
                continue
            try:
                event = pending.result()
            except StopAsyncIteration:
                return
            except Exception as exc:  # headers are sent: report it in the stream, then end it
                yield error_frame(exc)
                return
            if recheck is not None:
                try:
                    await recheck()
                except Exception as exc:
                    yield error_frame(exc)
                    return
            yield frame(event)
            pending = asyncio.ensure_future(anext(events))
    finally:
        # The watch ends inside its own task (leaving the bus); nothing here waits on it.
        pending.cancel()
