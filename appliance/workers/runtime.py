"""The life of one replica process: serve, register, heartbeat, run the role, exit.

Every role follows the same protocol: start a gRPC server on 127.0.0.1:0, RegisterReplica with
that address, then heartbeat every ~2 s while the role runs. The chief's role drives the job and
returns when done; the other roles serve the data plane until a Shutdown, a heartbeat answer of
keep_running=false or SIGTERM. Exit codes are documented in appliance.workers.lifecycle.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
from typing import Protocol

import grpc

from appliance._proto.v1 import dataplane_pb2_grpc
from appliance.domain.auth import COORDINATOR_CA_ENV, is_loopback
from appliance.domain.replica_errors import error_line, error_of
from appliance.domain.replica_identity import REPLICA_CERT_ENV, REPLICA_KEY_ENV
from appliance.workers.control import ControlPlane
from appliance.workers.lifecycle import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_SIGTERM,
    Ending,
    LifecycleServicer,
    ReplicaExit,
    StopSignal,
)
from appliance.workers.topology import JobLayout
from appliance.workers.transport.channels import CHANNEL_OPTIONS, PeerChannels, local_address
from appliance.workers.transport.job_credential import DataPlaneAuthentication, MissingCredential
from appliance.workers.transport.local_server import LocalServer, ServerPair
from appliance.workers.transport.replica_tls import ReplicaTls

log = logging.getLogger(__name__)

SERVER_GRACE_SECONDS = 0.2


@dataclasses.dataclass(frozen=True)
class WorkerOptions:
    """Command-line (or environment) settings of one replica process."""

    role: str
    job_id: str
    replica: str
    coordinator: str
    # The job's data-plane credential: every call to this replica's server must carry it.
    dataplane_token: str
    orphan_timeout: float = 60.0
    heartbeat_interval: float = 2.0
    # Deadline of one training step's data-plane calls; a dead peer fails the step, no hang.
    step_timeout: float = 30.0
    # This replica's certificate for mutual TLS with its peers; None: plaintext, token only.
    tls: ReplicaTls | None = None


class ReplicaRole(Protocol):
    """What differs between chief, cs2, memoryx and swarmx."""

    def add_services(self, server: grpc.aio.Server) -> None:
        """Add the role's data-plane servicers (ReplicaLifecycle is added by the runtime)."""

    def configure(self, layout: JobLayout) -> None:
        """Take the job topology handed over by the chief (unused by the chief itself)."""

    async def run(self, control: ControlPlane, stop: StopSignal) -> None:
        """The role's main work; returning ends the process with exit code 0."""

    async def close(self) -> None:
        """Release channels to peers."""


async def run_replica(options: WorkerOptions, role: ReplicaRole, channels: PeerChannels) -> Ending:
    """Run one replica until it finishes or is stopped; returns its exit code (and last error
    line). `channels` are the role's channels to its peers: negotiated at Configure."""
    stop = StopSignal()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.request, EXIT_SIGTERM, "SIGTERM received")
    loop.add_signal_handler(signal.SIGINT, stop.request, EXIT_SIGTERM, "SIGINT received")

    server = grpc.aio.server(
        options=CHANNEL_OPTIONS,
        interceptors=[DataPlaneAuthentication(options.dataplane_token, options.tls)],
    )
    # The same services for co-located peers, through shared memory (transport/channels.py).
    local = (
        LocalServer(
            local_address(options.dataplane_token, options.replica), options.dataplane_token
        )
        if channels.shared_memory
        else None
    )
    control: ControlPlane | None = None

    async def configure(layout: JobLayout) -> None:
        role.configure(layout)
        described = await channels.negotiate(layout.others(options.replica))
        if control is not None:
            control.set_data_plane(described)

    on_configure = None if options.role == "chief" else configure
    services = ServerPair(server, local)
    dataplane_pb2_grpc.add_ReplicaLifecycleServicer_to_server(
        LifecycleServicer(stop, on_configure), services
    )
    role.add_services(services)
    # A pod serves on its own IP (APPLIANCE_REPLICA_HOST, from the downward API); a local
    # process on loopback.
    host = os.environ.get("APPLIANCE_REPLICA_HOST") or "127.0.0.1"
    where = f"{_bracketed(host)}:0"
    tls = options.tls
    port = (
        server.add_insecure_port(where)
        if tls is None
        else server.add_secure_port(where, tls.server_credentials())
    )
    await server.start()
    if local is not None:
        try:
            await local.start()
        except OSError as err:  # e.g. a replica of this attempt still holds the name
            log.warning("serving gRPC only: no local socket (%s)", err)
            local = None
    address = f"{_bracketed(host)}:{port}"
    log.info(
        "%s of %s serving on %s (%s, pid %d)", options.replica, options.job_id, address,
        "plaintext" if tls is None else "mutual TLS", os.getpid(),
    )  # fmt: skip

    # Several addresses: coordinators without a Service in front (workers/control.py).
    addresses = [a.strip() for a in options.coordinator.split(",") if a.strip()]
    coordinators = [coordinator_channel(address) for address in addresses]
    control = ControlPlane(coordinators, options.job_id, options.replica, options.orphan_timeout)
    main = asyncio.create_task(_register_and_run(options, role, control, stop, address))
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({main, stopped}, return_when=asyncio.FIRST_COMPLETED)
        ending = _ending(main, stop)
    finally:
        for task in (main, stopped):
            task.cancel()
        await asyncio.gather(main, stopped, return_exceptions=True)
        await server.stop(SERVER_GRACE_SECONDS)
        if local is not None:
            await local.stop(SERVER_GRACE_SECONDS)
        await role.close()
        for channel in coordinators:
            await channel.close()
    return ending


async def _register_and_run(
    options: WorkerOptions,
    role: ReplicaRole,
    control: ControlPlane,
    stop: StopSignal,
    address: str,
) -> None:
    await control.register(address, os.getpid())
    heartbeat = asyncio.create_task(control.heartbeat_forever(options.heartbeat_interval, stop))
    work = asyncio.create_task(role.run(control, stop))
    try:
        done, _ = await asyncio.wait({heartbeat, work}, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()  # re-raise a failure of either
        if heartbeat in done:  # told to stop: the stop signal ends the process
            await asyncio.Future()
    finally:
        for task in (heartbeat, work):
            task.cancel()
        await asyncio.gather(heartbeat, work, return_exceptions=True)


def _ending(main: asyncio.Task[None], stop: StopSignal) -> Ending:
    """Log why the replica ends and pick its exit code and last error line."""
    if stop.requested:
        log.info("stopping: %s (exit %d)", stop.reason, stop.code)
        return Ending(stop.code, "" if stop.code in (EXIT_OK, EXIT_SIGTERM) else stop.reason)
    error = main.exception()
    if error is None:
        log.info("finished (exit 0)")
        return Ending(EXIT_OK)
    if isinstance(error, ReplicaExit):
        log.error("exiting: %s (exit %d)", error.reason, error.code)
        return Ending(error.code, error_line(error.reason) if error.code else "")
    log.error("failed: %s", error, exc_info=error)
    return Ending(EXIT_FAILED, error_of(error))


def _bracketed(host: str) -> str:
    """An IPv6 pod IP needs brackets in a HOST:PORT address."""
    return f"[{host}]" if ":" in host else host


def coordinator_channel(address: str) -> grpc.aio.Channel:
    """A channel to the coordinator: TLS verified by the CA it gave this replica, presenting
    this replica's own certificate (a coordinator serving mutual TLS requires one), or
    plaintext when it serves plaintext (then it listens on loopback only)."""
    ca = os.environ.get(COORDINATOR_CA_ENV)
    if not ca:
        if not is_loopback(address):
            raise MissingCredential(
                f"{COORDINATOR_CA_ENV} is not set and the coordinator {address} is not on this "
                "machine: replicas reach a remote coordinator over TLS only"
            )
        return grpc.aio.insecure_channel(address)
    cert, key = os.environ.get(REPLICA_CERT_ENV, ""), os.environ.get(REPLICA_KEY_ENV, "")
    credentials = grpc.ssl_channel_credentials(
        ca.encode(),
        private_key=key.encode() if cert and key else None,
        certificate_chain=cert.encode() if cert and key else None,
    )
    return grpc.aio.secure_channel(address, credentials)
