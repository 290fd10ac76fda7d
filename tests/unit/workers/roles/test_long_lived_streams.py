"""The pieces of the long-lived data-plane calls that a whole job does not reach on purpose."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import cast

import numpy as np
import pytest

from appliance._proto.v1 import common_pb2, control_pb2
from appliance.domain.params import OptimizerSection
from appliance.workers.models import optimizers
from appliance.workers.roles.cs2_push import GradientPush
from appliance.workers.roles.cs2_weights import UnitStream, WaferWeights
from appliance.workers.roles.memoryx import LayerShard, MemoryXRole
from appliance.workers.roles.swarmx import SwarmXRole
from appliance.workers.topology import JobLayout, PeerAddress, job_layout
from appliance.workers.transport.channels import PeerChannels
from appliance.workers.transport.relay import LayerRelay
from appliance.workers.transport.tensors import LayerTensors
from appliance.workers.transport.weight_rpc import WeightStreamingClient
from appliance.workers.transport.wire import WireChunk


def shard() -> LayerShard:
    weights = {"weight": np.zeros(3, dtype=np.float32)}
    return LayerShard(weights, optimizers.initial_state(OptimizerSection(), weights))


def memoryx_holding(layer: LayerShard) -> MemoryXRole:
    role = MemoryXRole(0)
    role._layers = {0: layer}
    return role


async def test_gradient_norms_wait_for_a_sum_still_on_its_way() -> None:
    """Pushes are no longer answered per step, so the chief's GradientNorms may come first."""
    layer = shard()
    waiting = asyncio.create_task(memoryx_holding(layer)._summed_or_past(layer, 0))
    await asyncio.sleep(0)
    assert not waiting.done()
    async with layer.changed:
        layer.gradient = {"weight": np.ones(3, dtype=np.float32)}
        layer.changed.notify_all()
    await asyncio.wait_for(waiting, 5)


async def test_gradient_norms_stop_waiting_for_a_layer_past_the_step() -> None:
    layer = shard()
    layer.version = 1
    await asyncio.wait_for(memoryx_holding(layer)._summed_or_past(layer, 0), 5)


async def test_gradient_norms_stop_waiting_once_a_push_broke_off() -> None:
    """Its sums would never come: the chief hears why instead of waiting out its deadline."""
    layer = shard()
    role = memoryx_holding(layer)
    waiting = asyncio.create_task(role._summed_or_past(layer, 0))
    await asyncio.sleep(0)
    assert not waiting.done()
    role._push_failed("gradient for step 3 but layer 0 is at version 2")
    await asyncio.wait_for(waiting, 5)
    assert role._push_failure == "gradient for step 3 but layer 0 is at version 2"
    role._push_failed("a later failure")
    assert role._push_failure == "gradient for step 3 but layer 0 is at version 2"


async def test_a_failed_push_to_memoryx_fails_the_weights_still_to_come() -> None:
    """Otherwise the CS-2s would wait for versions that never come until the step deadline."""
    role = SwarmXRole(0, step_timeout=5, channels=PeerChannels("t"))
    complete, pending = LayerRelay(), LayerRelay()
    complete.add(WireChunk(3, 1, 0, (), last=True))
    role._weights = {(3, 1): complete, (4, 0): pending}
    fetch = asyncio.create_task(asyncio.Event().wait())  # a stream of versions still open
    role._fetches.add(fetch)

    async def rejected() -> None:
        raise RuntimeError("memoryx said no")

    push = asyncio.create_task(rejected())
    await asyncio.wait({push})
    role._push_ended(push)

    assert role._weights == {} and isinstance(role._failure, RuntimeError)
    await asyncio.wait({fetch})
    assert fetch.cancelled()  # nothing more is kept: every later request fails at once
    assert [chunk.layer async for chunk in complete.chunks()] == [1]  # still served in full
    with pytest.raises(RuntimeError, match="memoryx said no"):
        async for _ in pending.chunks():
            pass


async def test_a_cancelled_push_fails_nothing() -> None:
    role = SwarmXRole(0, step_timeout=5, channels=PeerChannels("t"))
    role._weights = {(4, 0, 0): LayerRelay()}
    push = asyncio.create_task(asyncio.Event().wait())
    push.cancel()
    await asyncio.wait({push})
    role._push_ended(push)
    assert list(role._weights) == [(4, 0, 0)]


class GoneSwarmX:
    """A WeightStreamingClient whose PushGradients call fails."""

    async def push_gradients(self, chunks: object, deadline: float | None) -> None:
        raise RuntimeError("swarmx went away")


async def test_a_step_waiting_for_weights_fails_when_its_push_fails() -> None:
    """The next version would never come: the push carried the gradients it is made from."""

    push = GradientPush(cast(WeightStreamingClient, GoneSwarmX()), None)
    units = UnitStream(_layers(), WaferWeights())
    with pytest.raises(RuntimeError, match="swarmx went away"):
        await asyncio.wait_for(units.next(0, 4, 0, push.unless_ended), 5)
    units.close()


async def test_weights_already_here_are_taken_even_if_the_push_failed() -> None:
    push = GradientPush(cast(WeightStreamingClient, GoneSwarmX()), None)
    with pytest.raises(RuntimeError):
        await push.close()  # the call has ended
    layer = LayerTensors(4, 0, 0, {"weight": np.ones(3, dtype=np.float32)})
    wafer, delivered = WaferWeights(), asyncio.Event()
    units = UnitStream(_layers(layer, delivered=delivered), wafer)
    await asyncio.wait_for(delivered.wait(), 5)
    assert wafer.held == 12
    assert await units.next(0, 4, 0, push.unless_ended) is layer
    units.close()
    assert wafer.held == 0


async def _layers(
    *layers: LayerTensors, delivered: asyncio.Event | None = None
) -> AsyncIterator[LayerTensors]:
    """A weight stream that brings `layers`, then nothing more (it never ends); `delivered` is
    set once the reader took them all and asks for more."""
    for layer in layers:
        yield layer
    if delivered is not None:
        delivered.set()
    await asyncio.Event().wait()


def _layout(mode: common_pb2.Mode.ValueType) -> JobLayout:
    peers = [
        control_pb2.Peer(name=f"{role}-0", role=role, index=0, address=f"{role}:0")
        for role in ("chief", "cs2", "memoryx", "swarmx")
    ]
    topology = control_pb2.Topology(
        job_id="wsjob-test", num_csx=1, num_steps=4, params_yaml="{}", peers=peers, mode=mode
    )
    return job_layout(topology)


@pytest.mark.parametrize(
    ("mode", "fetched"),
    [
        (common_pb2.MODE_EVAL, [range(0, 1)]),  # only the version asked for
        (common_pb2.MODE_TRAIN_AND_EVAL, [range(0, 4)]),  # every training version, in one call
    ],
)
async def test_only_a_job_that_trains_opens_a_stream_of_versions(
    mode: common_pb2.Mode.ValueType, fetched: list[range]
) -> None:
    """An evaluation-only job never asks for a next version: a stream of them would hang."""
    role = SwarmXRole(0, step_timeout=5, channels=PeerChannels("t"))
    role.configure(_layout(mode))
    asked: list[range] = []

    async def stream_versions(
        owner: PeerAddress, versions: range, layers: list[int], deadline: float | None
    ) -> None:
        asked.append(versions)

    role._stream_versions = stream_versions  # type: ignore[method-assign]
    role._fetch(0, [0, 1, 2])
    await asyncio.gather(*role._fetches)
    assert asked == fetched
