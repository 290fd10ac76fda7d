"""The pieces of the long-lived data-plane calls that a whole job does not reach on purpose."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from appliance.domain.params import OptimizerSection
from appliance.workers import optimizers
from appliance.workers.memoryx import LayerShard, MemoryXRole
from appliance.workers.relay import LayerRelay
from appliance.workers.swarmx import SwarmXRole
from appliance.workers.wire import WireChunk


def shard() -> LayerShard:
    weights = {"weight": np.zeros(3, dtype=np.float32)}
    return LayerShard(weights, optimizers.initial_state(OptimizerSection(), weights))


async def test_gradient_norms_wait_for_a_sum_still_on_its_way() -> None:
    """Pushes are no longer answered per step, so the chief's GradientNorms may come first."""
    layer = shard()
    waiting = asyncio.create_task(MemoryXRole._summed_or_past(layer, 0))
    await asyncio.sleep(0)
    assert not waiting.done()
    async with layer.changed:
        layer.gradient = {"weight": np.ones(3, dtype=np.float32)}
        layer.changed.notify_all()
    await asyncio.wait_for(waiting, 5)


async def test_gradient_norms_stop_waiting_for_a_layer_past_the_step() -> None:
    layer = shard()
    layer.version = 1
    await asyncio.wait_for(MemoryXRole._summed_or_past(layer, 0), 5)


async def test_a_failed_push_to_memoryx_fails_the_weights_still_to_come() -> None:
    """Otherwise the CS-2s would wait for versions that never come until the step deadline."""
    role = SwarmXRole(0, step_timeout=5)
    complete, pending = LayerRelay(), LayerRelay()
    complete.add(WireChunk(3, 1, 0, (), last=True))
    role._weights = {(3, 1): complete, (4, 0): pending}
    role._streamed = range(3, 10)

    async def rejected() -> None:
        raise RuntimeError("memoryx said no")

    push = asyncio.create_task(rejected())
    await asyncio.wait({push})
    role._push_ended(push)

    assert role._weights == {} and role._streamed is None  # the next request starts afresh
    assert [chunk.layer async for chunk in complete.chunks()] == [1]  # still served in full
    with pytest.raises(RuntimeError, match="memoryx said no"):
        async for _ in pending.chunks():
            pass


async def test_a_cancelled_push_fails_nothing() -> None:
    role = SwarmXRole(0, step_timeout=5)
    role._weights = {(4, 0): LayerRelay()}
    push = asyncio.create_task(asyncio.Event().wait())
    push.cancel()
    await asyncio.wait({push})
    role._push_ended(push)
    assert list(role._weights) == [(4, 0)]
