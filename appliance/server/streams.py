"""How a long-lived stream (gRPC WatchJob and followed logs, REST and dashboard SSE) keeps
checking its caller: `rechecked` runs the check before each item, before each keep-alive, and
on its own at least every STREAM_RECHECK_SECONDS, so a token that expires or is revoked while
a stream is quiet ends it within about a second, not at its next message."""

from __future__ import annotations

import asyncio
import enum
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from appliance.server.auth import STREAM_RECHECK_SECONDS

T = TypeVar("T")


class Idle(enum.Enum):
    """What `rechecked` gives when its stream has been quiet for a while."""

    TICK = "tick"


async def rechecked(
    items: AsyncIterator[T],
    recheck: Callable[[], Awaitable[object]] | None,
    every: float = math.inf,
    recheck_every: float = STREAM_RECHECK_SECONDS,
) -> AsyncIterator[T | Idle]:
    """`items` as they come, and `Idle.TICK` after each `every` seconds without one; `recheck`
    runs before each of both and at least every `recheck_every` seconds, and what it raises
    (an expired or revoked token) ends the stream there. The one place a long-lived stream
    re-checks its caller."""
    loop = asyncio.get_running_loop()
    pending: asyncio.Future[T] = asyncio.ensure_future(anext(items))
    quiet_since = loop.time()
    try:
        while True:
            wait = every - (loop.time() - quiet_since)
            if recheck is not None:
                wait = min(wait, recheck_every)
            done, _ = await asyncio.wait({pending}, timeout=max(wait, 0.0))
            if recheck is not None:
                await recheck()
            if not done:
                if loop.time() - quiet_since >= every:
                    quiet_since = loop.time()
                    yield Idle.TICK
                continue
            try:
                item = pending.result()
            except StopAsyncIteration:
                return
            yield item
            quiet_since = loop.time()
            pending = asyncio.ensure_future(anext(items))
    finally:
        # Cancelling the pending read ends the stream inside its own task (a watch leaves the
        # bus there); nothing here waits on it.
        pending.cancel()
