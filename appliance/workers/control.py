"""A replica's calls to the coordinator's ReplicaControl service, with retries and orphan guard.

Registration, AwaitPeers and heartbeats retry on a backoff ladder while the coordinator is
unreachable (it may be restarting). If no call has succeeded for longer than the orphan timeout,
the replica gives up with exit code 3, so no replica outlives a dead control plane.

Given several coordinator addresses (coordinators without a Service in front), a replica keeps
calling the one that answered last; when it is unreachable or a standby (UNAVAILABLE), the next
call goes to the next address, and the backoff starts only after every address failed.

Heartbeats carry what the replica says of its data plane (`set_data_plane`); a new line is
sent at once rather than an interval later, so the job's replica detail shows it while the
transports are being set up.

Written here rather than with gRPC's retry policy (a service config retries on one channel,
never on the next coordinator's) or tenacity (the orphan clock spans every call, and a long
poll's "not yet" is no failure: both would be callbacks carrying this loop's state).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import grpc

from appliance._proto.v1 import common_pb2, control_pb2, control_pb2_grpc
from appliance.domain.auth import ATTEMPT_ENV, REPLICA_TOKEN_ENV, bearer_metadata
from appliance.domain.data_plane import bounded
from appliance.workers.lifecycle import EXIT_ORPHANED, ReplicaExit, StopSignal
from appliance.workers.waits import wait_at_most

log = logging.getLogger(__name__)

T = TypeVar("T")

# CANCELLED as an AioRpcError comes from the other end (a coordinator stopping cancels the calls
# it is serving); a call this replica cancels itself ends in asyncio.CancelledError instead.
RETRYABLE = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
)
BACKOFF_LADDER = (0.2, 0.5, 1.0, 2.0, 5.0)
CALL_TIMEOUT = 5.0
AWAIT_PEERS_WINDOW = 10.0


class ControlPlane:
    """The coordinator as seen from one replica of one job."""

    def __init__(
        self,
        channels: Sequence[grpc.aio.Channel],
        job_id: str,
        replica: str,
        orphan_timeout: float,
    ) -> None:
        self._stubs = [control_pb2_grpc.ReplicaControlStub(c) for c in channels]
        self._current = 0  # the coordinator that answered last
        # With authentication on, the coordinator gave this replica its job's token.
        token = os.environ.get(REPLICA_TOKEN_ENV)
        self._metadata = (bearer_metadata(token),) if token else None
        # Every call names the attempt this replica was started for (0: not told).
        attempt = os.environ.get(ATTEMPT_ENV, "0")
        self.attempt = int(attempt) if attempt.isdigit() and len(attempt) < 10 else 0
        self.job_id = job_id
        self.replica = replica
        self._orphan_timeout = orphan_timeout
        self._last_contact = time.monotonic()
        self._data_plane = ""
        self._data_plane_said = asyncio.Event()  # wakes the heartbeat loop early

    def set_data_plane(self, text: str) -> None:
        """Say how this replica's data plane reaches its peers, one short line such as
        `shared memory: swarmx-0, worker-0; grpc: none` (cut to MAX_DATA_PLANE characters).
        The next heartbeat, sent at once, carries it to the coordinator: the job's replica
        detail shows it. Call it on the replica's event loop."""
        self._data_plane = bounded(text)
        self._data_plane_said.set()

    @property
    def _stub(self) -> control_pb2_grpc.ReplicaControlStub:
        return self._stubs[self._current]

    def _next_coordinator(self) -> bool:
        """Call the next address from now on; True once every address was tried in turn."""
        self._current = (self._current + 1) % len(self._stubs)
        return self._current == 0

    async def register(self, address: str, pid: int) -> None:
        """Announce that this replica serves at `address`."""
        request = control_pb2.RegisterReplicaRequest(
            job_id=self.job_id,
            replica=self.replica,
            address=address,
            pid=pid,
            attempt=self.attempt,
        )
        await self._with_retry(
            "RegisterReplica",
            lambda: self._stub.RegisterReplica(
                request, timeout=CALL_TIMEOUT, metadata=self._metadata
            ),
        )
        log.info("registered %s of %s at %s", self.replica, self.job_id, address)

    async def await_peers(self) -> control_pb2.Topology:
        """Block until every replica of the job registered; returns the job's topology.

        The coordinator answers each window of AWAIT_PEERS_WINDOW seconds with DEADLINE_EXCEEDED
        while the job is still starting (a peer's pod may wait for a node for as long as the
        backend's pending timeout) and FAILED_PRECONDITION once it is over; so this waits for as
        long as the job starts, and raises when it ended."""
        request = control_pb2.AwaitPeersRequest(
            job_id=self.job_id,
            replica=self.replica,
            timeout_seconds=AWAIT_PEERS_WINDOW,
            attempt=self.attempt,
        )
        topology: control_pb2.Topology = await self._with_retry(
            "AwaitPeers",
            lambda: self._stub.AwaitPeers(
                request, timeout=AWAIT_PEERS_WINDOW + CALL_TIMEOUT, metadata=self._metadata
            ),
            orphan_clock=False,
        )
        return topology

    async def report_progress(
        self, progress: common_pb2.Progress, retry: bool, checkpointed: bool = False
    ) -> control_pb2.ReplicaDirective | None:
        """Send the chief's progress (`checkpointed`: after the checkpoint asked of it); without
        `retry`, a failed report is logged and skipped."""
        request = control_pb2.ReportProgressRequest(
            job_id=self.job_id,
            replica=self.replica,
            progress=progress,
            attempt=self.attempt,
            checkpointed=checkpointed,
        )
        if retry:
            directive: control_pb2.ReplicaDirective = await self._with_retry(
                "ReportProgress",
                lambda: self._stub.ReportProgress(
                    request, timeout=CALL_TIMEOUT, metadata=self._metadata
                ),
            )
            return directive
        for _ in self._stubs:
            try:
                directive = await self._stub.ReportProgress(
                    request, timeout=CALL_TIMEOUT, metadata=self._metadata
                )
                break
            except grpc.aio.AioRpcError as err:
                if err.code() not in RETRYABLE or len(self._stubs) == 1:
                    log.warning("progress report at step %d failed: %s", progress.step, err.code())
                    return None
                self._next_coordinator()
        else:
            log.warning("progress report at step %d failed: no coordinator leads", progress.step)
            return None
        self._last_contact = time.monotonic()
        return directive

    async def heartbeat_forever(self, interval: float, stop: StopSignal) -> None:
        """Heartbeat every `interval` seconds, and at once after `set_data_plane`; asks `stop`
        to exit 0 once told to stop."""
        while True:
            self._data_plane_said.clear()  # a line said from here on is sent by the next one
            directive: control_pb2.ReplicaDirective = await self._with_retry(
                "Heartbeat",
                lambda: self._stub.Heartbeat(
                    self._heartbeat_request(), timeout=CALL_TIMEOUT, metadata=self._metadata
                ),
            )
            if not directive.keep_running:
                stop.request(0, "the coordinator says the job is over")
                return
            await wait_at_most(self._data_plane_said, interval)

    def _heartbeat_request(self) -> control_pb2.HeartbeatRequest:
        return control_pb2.HeartbeatRequest(
            job_id=self.job_id,
            replica=self.replica,
            attempt=self.attempt,
            data_plane=self._data_plane,
        )

    async def _with_retry(
        self, what: str, call: Callable[[], Awaitable[T]], orphan_clock: bool = True
    ) -> T:
        """Retry `call` while the coordinator is unreachable, up to the orphan timeout.

        `orphan_clock=False` is for long polls (AwaitPeers) whose DEADLINE_EXCEEDED only means
        "not yet" (the coordinator ends each window with it while the job starts): those
        retries do not count as the coordinator being unreachable.
        """
        attempt = 0
        while True:
            try:
                result = await call()
            except grpc.aio.AioRpcError as err:
                code = err.code()
                if code not in RETRYABLE:
                    raise
                waiting_on_peers = code is grpc.StatusCode.DEADLINE_EXCEEDED and not orphan_clock
                if waiting_on_peers:
                    log.info("%s: %s", what, err.details())
                    self._last_contact = time.monotonic()
                    if len(self._stubs) > 1:  # or a leader paused: ask the others too
                        self._next_coordinator()
                    continue
                if len(self._stubs) > 1 and not self._next_coordinator():
                    continue  # the next address at once; the backoff after a full round
                silent_for = time.monotonic() - self._last_contact
                if silent_for > self._orphan_timeout:
                    raise ReplicaExit(
                        EXIT_ORPHANED,
                        f"coordinator unreachable for {silent_for:.0f}s (> orphan timeout "
                        f"{self._orphan_timeout:.0f}s) during {what}: {code.name}",
                    ) from err
                delay = BACKOFF_LADDER[min(attempt, len(BACKOFF_LADDER) - 1)]
                log.warning("%s failed (%s); retrying in %.1fs", what, code.name, delay)
                attempt += 1
                await asyncio.sleep(delay)
            else:
                self._last_contact = time.monotonic()
                return result
