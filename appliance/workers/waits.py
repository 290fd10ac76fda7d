"""Waiting for an event with a time limit, safely on Python 3.11."""

from __future__ import annotations

import asyncio


async def wait_at_most(event: asyncio.Event, seconds: float) -> None:
    """Until `event` is set or `seconds` have passed. Neither asyncio.wait_for nor
    asyncio.timeout: on Python 3.11 the first swallows a cancellation that arrives as the
    event is set (a replica then never ended: its heartbeat loop outlived the failed role),
    and the second, when its timer fires as the event is set, leaves a cancellation pending
    that hits the next await (the next heartbeat call came back CANCELLED)."""
    waiting = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiting}, timeout=seconds)
    finally:
        waiting.cancel()
