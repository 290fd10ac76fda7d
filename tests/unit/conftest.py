"""Unit-test fixtures: `ctx`, a Context over a real SQLite store (tests/unit/harness.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from appliance.services.context import Context
from tests.unit.harness import Clock, store_context


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[Context]:
    async with store_context(tmp_path) as context:
        yield context


@pytest.fixture
def clock(ctx: Context) -> Clock:
    """The clock of `ctx`: move it with `clock.now += seconds`."""
    assert isinstance(ctx.clock, Clock)
    return ctx.clock
