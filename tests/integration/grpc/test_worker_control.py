"""A replica waiting for its peers, against the real ReplicaControl servicer on 127.0.0.1:0.

The chief asks the coordinator in windows; a window that ends while the job still starts is
"not yet" (DEADLINE_EXCEEDED) and the chief asks again, for as long as the job starts. Only a
job that is over ends the wait (FAILED_PRECONDITION). Before, every window's end was a
Conflict, so a job whose pods took longer than one window to start lost its chief with exit 1.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from appliance._proto.v1 import control_pb2, control_pb2_grpc
from appliance.domain.auth import ATTEMPT_ENV
from appliance.domain.phases import Phase
from appliance.loops.scheduling import SchedulerLoop
from appliance.server.grpc.control import ReplicaControlServicer
from appliance.services.context import Context
from appliance.services.replicas import ReplicaService
from appliance.workers import control
from appliance.workers.control import ControlPlane
from tests.unit.harness import NOW, create, new_jobs

JOB = "wsjob-awaitpeers0000"
WINDOW = 0.1  # seconds; the worker's window, made short (the server honours what it is asked)


class CountingServicer(ReplicaControlServicer):
    """The real servicer, counting the AwaitPeers windows it answered."""

    def __init__(self, replicas: ReplicaService) -> None:
        super().__init__(replicas)
        self.windows = 0
        self.asked = asyncio.Condition()

    async def AwaitPeers(
        self, request: control_pb2.AwaitPeersRequest, context: grpc.aio.ServicerContext
    ) -> control_pb2.Topology:
        async with self.asked:
            self.windows += 1
            self.asked.notify_all()
        return await super().AwaitPeers(request, context)

    async def wait_for_windows(self, count: int) -> None:
        async with asyncio.timeout(30), self.asked:
            await self.asked.wait_for(lambda: self.windows >= count)


@pytest.fixture
async def served(
    ctx: Context, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[CountingServicer, ControlPlane]]:
    """JOB initializing (no replica registered), the servicer on a port, a chief's view of it."""
    monkeypatch.setattr(control, "AWAIT_PEERS_WINDOW", WINDOW)
    monkeypatch.setenv(ATTEMPT_ENV, "1")  # what the backend tells a replica of attempt 1
    create(ctx, new_jobs([JOB], num_csx=2), NOW)
    await SchedulerLoop(ctx).run_once()
    await ctx.set_phase(JOB, Phase.INITIALIZING, "started", expected=Phase.SCHEDULED)
    servicer = CountingServicer(ReplicaService(ctx))
    server = grpc.aio.server()
    control_pb2_grpc.add_ReplicaControlServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield servicer, ControlPlane([channel], JOB, "chief-0", orphan_timeout=60)
    finally:
        await channel.close()
        await server.stop(None)


async def test_the_chief_waits_across_windows_until_its_peers_registered(
    ctx: Context, served: tuple[CountingServicer, ControlPlane]
) -> None:
    servicer, chief = served
    waiting = asyncio.create_task(chief.await_peers())
    await servicer.wait_for_windows(3)  # two windows ended "not yet"; the chief asked again
    assert not waiting.done()

    replicas = ReplicaService(ctx)
    for replica in ctx.store.replicas(JOB):
        await replicas.register(JOB, 1, replica.name, "127.0.0.1:2", 42)
    topology = await asyncio.wait_for(waiting, 30)
    assert topology.job_id == JOB
    assert {p.name for p in topology.peers} == {r.name for r in ctx.store.replicas(JOB)}


async def test_the_chief_stops_waiting_once_the_job_is_over(
    ctx: Context, served: tuple[CountingServicer, ControlPlane]
) -> None:
    servicer, chief = served
    waiting = asyncio.create_task(chief.await_peers())
    await servicer.wait_for_windows(2)
    await ctx.set_phase(JOB, Phase.FAILED, "replica cs2-1 failed: pod unschedulable")
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        await asyncio.wait_for(waiting, 30)
    assert ended.value.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert "is FAILED: replica cs2-1 failed: pod unschedulable" in (ended.value.details() or "")
