"""A loop woken in the same moment it is cancelled still stops. On Python 3.11
`asyncio.wait_for` swallows such a cancel: the scheduler loop went on waiting for ever and a
coordinator's stop hung (seen on a busy machine). The loops wait with `asyncio.timeout`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from appliance.loops.reconciling import Reconciler
from appliance.loops.scheduling import SchedulerLoop
from appliance.services.context import Context
from tests.unit.loops.test_reconciling import backend, reconciler  # noqa: F401


async def _woken_and_cancelled(
    run: Callable[[], Coroutine[Any, Any, None]], wanted: asyncio.Event
) -> None:
    task = asyncio.get_running_loop().create_task(run())
    while not wanted._waiters:  # type: ignore[attr-defined]  # noqa: ASYNC110  # until idle
        await asyncio.sleep(0.001)
    wanted.set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await task


async def test_the_scheduler_loop_woken_as_it_is_cancelled_stops(ctx: Context) -> None:
    await _woken_and_cancelled(SchedulerLoop(ctx).run, ctx.bus.schedule_wanted)


async def test_the_reconcile_sweeps_woken_as_they_are_cancelled_stop(
    ctx: Context,
    reconciler: Reconciler,  # noqa: F811
) -> None:
    await _woken_and_cancelled(reconciler.run_sweeps, ctx.bus.reconcile_wanted)
