"""A replica waiting for its peers, against the real ReplicaControl servicer on 127.0.0.1:0.

The chief asks the coordinator in windows; a window that ends while the job still starts is
"not yet" (DEADLINE_EXCEEDED) and the chief asks again, for as long as the job starts. Only a
job that is over ends the wait (FAILED_PRECONDITION). Before, every window's end was a
Conflict, so a job whose pods took longer than one window to start lost its chief with exit 1.

A replica's heartbeat carries what it says of its data plane: the job's replica detail shows it
after the next heartbeat, sent at once; what a hostile replica sends is bounded and escaped.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from appliance._proto.v1 import control_pb2, control_pb2_grpc
from appliance.domain.auth import ATTEMPT_ENV
from appliance.domain.data_plane import MAX_DATA_PLANE
from appliance.domain.phases import Phase
from appliance.loops.scheduling import SchedulerLoop
from appliance.protocol import convert
from appliance.server.grpc.control import ReplicaControlServicer
from appliance.services.context import Context
from appliance.services.replicas import ReplicaService
from appliance.workers import control
from appliance.workers.control import ControlPlane
from appliance.workers.lifecycle import StopSignal
from tests.unit.harness import NOW, create, job_service, new_jobs

JOB = "wsjob-awaitpeers0000"
WINDOW = 0.1  # seconds; the worker's window, made short (the server honours what it is asked)


class CountingServicer(ReplicaControlServicer):
    """The real servicer, counting the AwaitPeers windows and the heartbeats it answered."""

    def __init__(self, replicas: ReplicaService) -> None:
        super().__init__(replicas)
        self.windows = 0
        self.heartbeats: list[control_pb2.HeartbeatRequest] = []
        self.cancel_heartbeats = 0  # how many to end CANCELLED, as a stopping server does
        self.asked = asyncio.Condition()
        self.address = ""  # where it serves

    async def Heartbeat(
        self, request: control_pb2.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> control_pb2.ReplicaDirective:
        if self.cancel_heartbeats:
            self.cancel_heartbeats -= 1
            await context.abort(grpc.StatusCode.CANCELLED, "the server is stopping")
        directive = await super().Heartbeat(request, context)
        async with self.asked:
            self.heartbeats.append(request)
            self.asked.notify_all()
        return directive

    async def wait_for_heartbeats(self, count: int) -> None:
        async with asyncio.timeout(30), self.asked:
            await self.asked.wait_for(lambda: len(self.heartbeats) >= count)

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
    servicer.address = f"127.0.0.1:{port}"
    channel = grpc.aio.insecure_channel(servicer.address)
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


async def _running(servicer: CountingServicer, ctx: Context) -> None:
    """Every replica of JOB registered: the job runs."""
    for replica in ctx.store.replicas(JOB):
        await servicer.replicas.register(JOB, 1, replica.name, "127.0.0.1:2", 42)
    assert ctx.store.get_job(JOB).phase is Phase.RUNNING


async def _data_planes(ctx: Context) -> dict[str, str]:
    """What the job's replica detail says of each replica's data plane (as the doors show it)."""
    job = await job_service(ctx).get(JOB)
    shown = {r.name: r.data_plane for r in convert.job_to_pb(job).replicas}
    assert shown == {r.name: r.data_plane for r in job.replicas}
    return shown


async def test_a_data_plane_said_is_in_the_job_view_after_the_next_heartbeat_sent_at_once(
    ctx: Context, served: tuple[CountingServicer, ControlPlane]
) -> None:
    servicer, chief = served
    await _running(servicer, ctx)
    beating = asyncio.create_task(chief.heartbeat_forever(3600, StopSignal()))  # one an hour
    try:
        await servicer.wait_for_heartbeats(1)
        assert set((await _data_planes(ctx)).values()) == {""}  # not chosen yet

        chief.set_data_plane("shared memory: swarmx-0, worker-0; grpc: none")
        await servicer.wait_for_heartbeats(2)  # at once, not an hour later
        shown = await _data_planes(ctx)
        assert shown.pop("chief-0") == "shared memory: swarmx-0, worker-0; grpc: none"
        assert set(shown.values()) == {""}  # the others said nothing

        chief.set_data_plane("x" * 10_000)  # cut by the replica before it is sent
        await servicer.wait_for_heartbeats(3)
        assert len(servicer.heartbeats[-1].data_plane) == MAX_DATA_PLANE
        assert (await _data_planes(ctx))["chief-0"] == "x" * (MAX_DATA_PLANE - 1) + "…"
    finally:
        beating.cancel()


async def test_a_hostile_data_plane_is_bounded_and_escaped_and_only_its_attempt_writes_it(
    ctx: Context, served: tuple[CountingServicer, ControlPlane]
) -> None:
    servicer, _ = served
    await _running(servicer, ctx)
    hostile = "\x1b]0;owned\x07 grpc:\n\x1b[31m" + "y" * 10_000  # 10 KB, control characters

    def beat(text: str, attempt: int = 1) -> control_pb2.HeartbeatRequest:
        return control_pb2.HeartbeatRequest(
            job_id=JOB, replica="cs2-0", attempt=attempt, data_plane=text
        )

    async with grpc.aio.insecure_channel(servicer.address) as channel:  # a replica of its own
        stub = control_pb2_grpc.ReplicaControlStub(channel)
        stale = await stub.Heartbeat(beat("grpc: from an attempt that is over", attempt=2))
        assert not stale.keep_running
        assert (await _data_planes(ctx))["cs2-0"] == ""
        assert (await stub.Heartbeat(beat(hostile))).keep_running
    line = (await _data_planes(ctx))["cs2-0"]
    assert len(line) == MAX_DATA_PLANE and line.endswith("…")
    assert line.startswith("\\x1b]0;owned\\x07 grpc:\\x0a\\x1b[31myyy")
    assert line.isprintable()


async def test_a_call_the_coordinator_cancels_while_it_stops_is_retried(
    served: tuple[CountingServicer, ControlPlane], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A coordinator that stops cancels the calls it is serving: the replica retries (as for
    UNAVAILABLE) instead of exiting 1, so the restarted coordinator finds it running."""
    servicer, chief = served
    monkeypatch.setattr(control, "BACKOFF_LADDER", (0.01,))
    servicer.cancel_heartbeats = 2
    beating = asyncio.create_task(chief.heartbeat_forever(60, StopSignal()))
    try:
        await servicer.wait_for_heartbeats(1)
        assert servicer.cancel_heartbeats == 0 and not beating.done()
    finally:
        beating.cancel()
        await asyncio.gather(beating, return_exceptions=True)
