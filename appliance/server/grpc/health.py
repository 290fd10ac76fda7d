"""gRPC health checking (grpc.health.v1) and server reflection, so that grpcurl and Kubernetes
gRPC probes work.

Health says what /readyz says: SERVING while this coordinator is ready (it leads or is the
only one, the store answers, the backend can start replicas), NOT_SERVING otherwise (a
standby, a store that cannot be reached). The server as a whole ("") and each of its API
services carry the same status, brought up to date every HEALTH_INTERVAL seconds (a Watch
hears of a change then), and NOT_SERVING for good once the coordinator stops or steps down.
Both services are public (server/grpc/authn.py): a probe carries no token, and a standby
answers them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection

log = logging.getLogger(__name__)
HEALTH_INTERVAL = 1.0
HEALTH = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
REFLECTION = reflection.SERVICE_NAME
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class HealthReporter:
    """Keeps the health service's statuses at what `problem()` (Readiness.problem) says."""

    def __init__(
        self,
        servicer: health_aio.HealthServicer,
        problem: Callable[[], Awaitable[str | None]],
        services: Sequence[str],
        interval: float = HEALTH_INTERVAL,
    ) -> None:
        self._servicer = servicer
        self._problem = problem
        self._names = ("", *services)
        self._interval = interval

    async def update(self) -> None:
        """Set every status to what readiness says now (a probe that fails: NOT_SERVING)."""
        try:
            problem = await self._problem()
        except Exception as exc:
            log.warning("health: readiness could not be probed: %s", exc)
            problem = str(exc) or type(exc).__name__
        status = NOT_SERVING if problem else SERVING
        for name in self._names:
            await self._servicer.set(name, status)

    async def run(self) -> None:
        """Update every HEALTH_INTERVAL seconds until cancelled; then NOT_SERVING for good."""
        try:
            while True:
                await asyncio.sleep(self._interval)
                await self.update()
        finally:
            await self.stop()

    async def stop(self) -> None:
        """NOT_SERVING for good (the coordinator stops, or stepped down)."""
        await self._servicer.enter_graceful_shutdown()


def serve_health_and_reflection(
    server: grpc.aio.Server,
    problem: Callable[[], Awaitable[str | None]],
    services: Sequence[str],
) -> HealthReporter:
    """Add both services to `server` (before it starts); update the reporter returned once
    before serving, then run it."""
    servicer = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    reflection.enable_server_reflection((*services, HEALTH, REFLECTION), server)
    return HealthReporter(servicer, problem, services)
