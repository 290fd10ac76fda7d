"""Large inputs are checked in other processes, within a time bound and a bound on waiting
calls; a checker that dies costs one call an error and the next call works. Real processes."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator

import pytest

from appliance.domain.errors import InvalidSpec, Unavailable
from appliance.domain.spec import validate_spec
from appliance.services.offload import INLINE_BELOW_BYTES, Offload

LARGE = INLINE_BELOW_BYTES


@pytest.fixture
async def offload() -> AsyncIterator[Offload]:
    pool = Offload(workers=1, max_waiting=1, seconds=20)
    try:
        yield pool
    finally:
        pool.close()


async def test_small_inputs_run_inline_and_large_ones_in_another_process(
    offload: Offload,
) -> None:
    assert await offload.run(LARGE - 1, "params", os.getpid) == os.getpid()
    assert await offload.run(LARGE, "params", os.getpid) != os.getpid()


async def test_a_refusal_in_the_checker_names_its_field(offload: Offload) -> None:
    with pytest.raises(InvalidSpec, match="nests deeper") as refused:
        text = "model: " + "[" * 30_000 + "]" * 30_000
        await offload.run(LARGE, "params", validate_spec, params_yaml=text, num_csx=1, num_steps=1)
    assert refused.value.field == "params"


async def test_too_slow_is_refused_and_too_many_waiting_is_unavailable() -> None:
    offload = Offload(workers=1, max_waiting=1, seconds=0.5)
    try:
        slow = asyncio.create_task(offload.run(LARGE, "params", time.sleep, 3))
        await asyncio.sleep(0)  # one turn of the loop: the slow call takes the one place
        assert offload.waiting == 1
        with pytest.raises(Unavailable, match="retry"):
            await offload.run(LARGE, "params", os.getpid)
        with pytest.raises(InvalidSpec, match="took longer than 0 s") as refused:
            await slow
        assert refused.value.field == "params"
    finally:
        offload.close()


async def test_a_check_past_its_bound_stops_in_the_checker_which_then_serves_the_next() -> None:
    """Refusing the caller is not enough: the checker stops working on it (two refused 60 s
    checks used to keep both checkers busy for minutes)."""
    offload = Offload(workers=1, max_waiting=2, seconds=0.5)
    try:
        checker = await offload.run(LARGE, "params", os.getpid)
        with pytest.raises(InvalidSpec, match="took longer than"):
            await offload.run(LARGE, "params", time.sleep, 600)
        # The same checker, free again at once (were it still asleep, this would wait 600 s).
        assert await asyncio.wait_for(offload.run(LARGE, "params", os.getpid), 30) == checker
    finally:
        offload.close()


async def test_a_checker_that_dies_fails_its_call_and_the_next_one_works(
    offload: Offload,
) -> None:
    with pytest.raises(InvalidSpec, match="its checker died"):
        await offload.run(LARGE, "params", os.abort)
    assert await offload.run(LARGE, "params", os.getpid) != os.getpid()
