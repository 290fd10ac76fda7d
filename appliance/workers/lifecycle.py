"""How a replica process ends: exit codes, the stop signal, and the ReplicaLifecycle service.

Exit codes (what the backend sees):
- 0   finished (chief), told to stop (Shutdown RPC or heartbeat keep_running=false)
- 1   failed; the reason is logged
- 3   orphaned: the coordinator was unreachable for longer than the orphan timeout
- 4   a replica it called failed (the chief's call to a killed CS-2): the cause is elsewhere,
      and the coordinator waits a moment for it (domain/restarts.py)
- 143 stopped by SIGTERM (128 + 15, the shell convention)

A replica that fails (1, 3, 4) says why in one last error line (domain/replica_errors.py):
the `Ending` of its run carries it to the program's top level, which prints it last.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable

import grpc

from appliance._proto.v1 import control_pb2, dataplane_pb2, dataplane_pb2_grpc
from appliance.domain.restarts import EXIT_PEER_FAILED as EXIT_PEER_FAILED
from appliance.workers.topology import JobLayout, job_layout

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_ORPHANED = 3
EXIT_SIGTERM = 143


@dataclasses.dataclass(frozen=True)
class Ending:
    """How a replica's run ended: its exit code and, for a failure, its last error line."""

    code: int
    error: str = ""


class ReplicaExit(Exception):
    """Raised to end the replica with a specific exit code and a reason to log."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class StopSignal:
    """The first request to stop wins; its exit code and reason end the process."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.code = EXIT_OK
        self.reason = ""

    def request(self, code: int, reason: str) -> None:
        if not self._event.is_set():
            self.code, self.reason = code, reason
            self._event.set()

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        await self._event.wait()


class LifecycleServicer(dataplane_pb2_grpc.ReplicaLifecycleServicer):
    """Configure (hand over the topology) and Shutdown, served by every replica."""

    def __init__(
        self, stop: StopSignal, on_configure: Callable[[JobLayout], Awaitable[None]] | None
    ) -> None:
        self._stop = stop
        self._on_configure = on_configure

    async def Configure(
        self, request: control_pb2.Topology, context: grpc.aio.ServicerContext
    ) -> dataplane_pb2.ConfigureResponse:
        if self._on_configure is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this replica takes no topology")
            raise AssertionError("unreachable")
        try:
            layout = job_layout(request)
        except ValueError as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad topology: {err}")
        await self._on_configure(layout)
        return dataplane_pb2.ConfigureResponse()

    async def Shutdown(
        self, request: dataplane_pb2.ShutdownRequest, context: grpc.aio.ServicerContext
    ) -> dataplane_pb2.ShutdownResponse:
        # Answer first, stop right after: the caller should not see its own call cut off.
        asyncio.get_running_loop().call_soon(
            self._stop.request, EXIT_OK, f"shutdown requested: {request.reason or 'no reason'}"
        )
        return dataplane_pb2.ShutdownResponse()
