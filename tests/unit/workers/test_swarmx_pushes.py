"""SwarmX's gradient pushes to MemoryX, opened ahead of the step that uses them."""

from __future__ import annotations

import asyncio

from appliance.workers.swarmx import SwarmXRole
from appliance.workers.topology import PeerAddress
from appliance.workers.wire import WireChunk

MEMORYX = PeerAddress("memoryx-0", "memoryx", 0, "127.0.0.1:1")


async def open_call() -> None:
    """Stands in for a PushGradients call that has not ended."""
    await asyncio.Event().wait()


async def test_spare_pushes_are_taken_while_their_calls_are_open() -> None:
    role = SwarmXRole(0, step_timeout=5)
    call = asyncio.create_task(open_call())
    spare = ({MEMORYX: asyncio.Queue[WireChunk | None]()}, {MEMORYX: call})
    role._spare_pushes = spare
    assert role._take_spare_pushes() is spare
    assert role._spare_pushes is None and role._take_spare_pushes() is None
    call.cancel()


async def test_a_spare_push_that_already_ended_is_dropped() -> None:
    """A push opened before an evaluation that outlasted its deadline must not be used by the
    next training step (its gradients would go nowhere)."""
    role = SwarmXRole(0, step_timeout=5)
    other = PeerAddress("memoryx-1", "memoryx", 1, "127.0.0.1:2")

    async def deadline_exceeded() -> None:
        raise TimeoutError("deadline exceeded")

    ended = asyncio.create_task(deadline_exceeded())
    still_open = asyncio.create_task(open_call())
    await asyncio.wait({ended})
    role._spare_pushes = (
        {MEMORYX: asyncio.Queue(), other: asyncio.Queue()},
        {MEMORYX: ended, other: still_open},
    )
    assert role._take_spare_pushes() is None
    await asyncio.wait({still_open})
    assert still_open.cancelled()  # the other MemoryX's unused call is closed too
    assert role._spare_pushes is None
