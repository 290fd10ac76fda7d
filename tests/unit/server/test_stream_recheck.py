"""A long-lived stream re-checks its caller on keep-alives too: a quiet stream (the dashboard's
change feed with nothing changing, a log with no new line) ends at its next keep-alive once
the token is revoked, instead of staying open until something happens."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from appliance.domain.auth import Principal
from appliance.server.auth import Authenticator, create_token
from appliance.server.rest.events import sse_stream
from appliance.server.streams import Idle, rechecked


async def _quiet(never: asyncio.Event) -> AsyncIterator[int]:
    await never.wait()
    yield 0


async def test_a_quiet_stream_ends_at_its_next_keep_alive_once_the_token_is_revoked(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tokens.yaml"
    bob = create_token(path, "bob", [], admin=False)
    auth = Authenticator.from_file(path)

    async def recheck() -> Principal:
        return auth.principal(f"Bearer {bob}")

    frames = sse_stream(_quiet(asyncio.Event()), recheck, keepalive=0.01, frame=lambda _: b"x")
    assert await anext(frames) == b": keep-alive\n\n"
    path.write_text(yaml.safe_dump({"tokens": []}))
    auth.reload()  # as SIGHUP does; else within RELOAD_CHECK_SECONDS
    ended = await anext(frames)
    assert ended.startswith(b"event: error") and b'"unauthenticated"' in ended
    with pytest.raises(StopAsyncIteration):
        await anext(frames)


async def test_rechecked_gives_items_and_ticks_and_ends_when_the_recheck_raises() -> None:
    allowed = {"yes": True}

    async def recheck() -> None:
        if not allowed["yes"]:
            raise PermissionError("revoked")

    async def two() -> AsyncIterator[int]:
        yield 1
        yield 2

    assert [item async for item in rechecked(two(), recheck, every=10)] == [1, 2]
    quiet = rechecked(_quiet(asyncio.Event()), recheck, every=0.01)
    assert await anext(quiet) is Idle.TICK
    allowed["yes"] = False
    with pytest.raises(PermissionError):
        await anext(quiet)
