"""The coordinator process: the parts the composition root wires (appliance/composition),
the gRPC and HTTP servers in front of them, leader election; run; drain.

Stopping drains the servers and stops the loops but leaves replicas running: a restarted
coordinator adopts them (see Reconciler.recover).

Several coordinators on one PostgreSQL store elect a leader (loops/leadership.py): each serves
its doors at once, refusing callers while it stands by (server/grpc/standby.py,
server/rest/standby.py); the one elected raises the store's fence to its epoch, adopts the
replicas, and only then schedules and reconciles. One that loses its lease stops its loops at
once and `stepped_down` is set: the process exits, and starts again as a standby. SQLite
allows one coordinator: a second on the same file is refused at start.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import grpc
import uvicorn

from appliance._proto.v1 import cluster_pb2_grpc, control_pb2_grpc
from appliance.composition import Office, StartupError, election, wire
from appliance.config import Settings
from appliance.domain.auth import COORDINATOR_CA_ENV
from appliance.domain.listing import JobQuery
from appliance.server.auth import Authenticator
from appliance.server.client_certificates import (
    ClientCertificateRequired,
    PresentedCertificateProtocol,
)
from appliance.server.grpc.audit import AuditCalls
from appliance.server.grpc.authn import CLUSTER, CONTROL, Authentication
from appliance.server.grpc.cluster import ClusterServicer
from appliance.server.grpc.control import ReplicaControlServicer
from appliance.server.grpc.health import HealthReporter, serve_health_and_reflection
from appliance.server.grpc.limiting import Limiting
from appliance.server.grpc.metrics import CallMetrics
from appliance.server.grpc.standby import StandbyRefusal
from appliance.server.http_protocol import JsonErrorsProtocol
from appliance.server.oidc import OidcVerifier
from appliance.server.pki import CertificateAuthority, PkiError
from appliance.server.replica_identity import ReplicaIdentities
from appliance.server.replica_tokens import ReplicaTokens
from appliance.server.rest.app import create_app
from appliance.server.tls import ServingTls, TlsError, check_plaintext_allowed
from appliance.server.web.app import COOKIE_PATHS, install_web

__all__ = ["Coordinator", "StartupError", "listen_tcp"]

log = logging.getLogger(__name__)


class Coordinator:
    """One coordinator process: gRPC + HTTP servers, scheduler and reconciler loops."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.grpc_port = 0
        self.http_port = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._grpc: grpc.aio.Server | None = None
        self._http: uvicorn.Server | None = None
        self._health: HealthReporter | None = None
        self.tls: ServingTls | None = None  # None: plaintext (insecure, on loopback only)
        self._oidc: OidcVerifier | None = None
        self.office: Office | None = None
        # Set when this coordinator lost its leadership lease: its owner ends the process.
        self.stepped_down = asyncio.Event()

    @property
    def address(self) -> str:
        return f"{self.settings.host}:{self.grpc_port}"

    async def start(self) -> None:
        s, server = self.settings, self.settings.server
        chosen = election(s)
        if chosen != "off" and not s.store.is_postgres:
            raise StartupError(
                f"leader election ({chosen}) needs PostgreSQL as the store; set "
                "APPLIANCE_DATABASE_URL, or run one coordinator on SQLite"
            )
        if s.tls.insecure:  # refused before anything is made
            _plaintext_allowed(server.host)
        # Both ports before the store is opened: a taken port is one line and nothing started.
        _check_free(server.host, server.grpc_port, "gRPC", "--grpc-port")
        http_socket = listen_tcp(server.host, server.http_port)
        self.http_port = http_socket.getsockname()[1]
        try:
            self.tls = _serving_tls(s)
            identities = _replica_identities(s, self.tls)
            self.parts = parts = await wire(s, elected=chosen != "off")
        except BaseException:
            http_socket.close()
            raise
        self.ctx, self.backend, uses = parts.ctx, parts.backend, parts.uses
        self.jobs, self.leadership = uses.jobs, parts.leadership
        if s.auth.oidc is not None:
            try:  # off the loop: a JWKS URL's first fetch may take seconds
                self._oidc = await asyncio.to_thread(OidcVerifier, s.auth.oidc)
            except BaseException:
                http_socket.close()
                await parts.close()
                raise
        self.auth = Authenticator.from_file(s.auth.tokens_file, oidc=self._oidc)
        # Replicas present their job's token to us with authentication on, and its data-plane
        # token to each other always (replica_tokens.py).
        try:
            tokens = ReplicaTokens.from_key_file(
                s.auth.replica_key_file, control=self.auth.enabled
            )
        except (OSError, ValueError) as exc:
            http_socket.close()
            await parts.close()
            self._close_oidc()
            raise StartupError(f"cannot use the replica token key: {exc}") from None
        self.backend.replica_secrets = _with_coordinator_ca(tokens.environment, self.tls)
        if identities is not None:  # mutual TLS between the replicas: per-replica certificates
            self.backend.replica_identity = identities.environment
        control_tokens = tokens if self.auth.enabled else None
        self._grpc = grpc.aio.server(
            # grpcio binds with SO_REUSEPORT by default: a second process of the same user could
            # bind this port too and take a share of the connections (and the tokens on them).
            options=[("grpc.so_reuseport", 0)],
            interceptors=[
                CallMetrics(uses.metrics.metrics),  # first: it counts what the others refuse
                StandbyRefusal(self.leadership.problem),
                AuditCalls(uses.audit, self.auth.enabled),  # around authentication: its refusals
                Authentication(self.auth, control_tokens),
                Limiting(uses.limits),  # inside Authentication: it limits the caller
            ],
        )
        cluster = ClusterServicer(uses)
        cluster_pb2_grpc.add_ClusterServiceServicer_to_server(cluster, self._grpc)
        control_pb2_grpc.add_ReplicaControlServicer_to_server(
            ReplicaControlServicer(uses.replicas), self._grpc
        )
        problem = uses.readiness.problem
        self._health = serve_health_and_reflection(self._grpc, problem, (CLUSTER, CONTROL))
        try:
            where = f"{server.host}:{server.grpc_port}"
            self.grpc_port = (
                self._grpc.add_insecure_port(where)
                if self.tls is None
                else self._grpc.add_secure_port(where, self.tls.grpc_credentials())
            )
        except RuntimeError:  # taken between the check and here
            http_socket.close()
            await self._grpc.stop(None)
            await parts.close()
            self._close_oidc()
            raise StartupError(
                _in_use(server.host, server.grpc_port, "gRPC", "--grpc-port")
            ) from None
        address = server.coordinator_address or f"127.0.0.1:{self.grpc_port}"
        self.backend.coordinator_address = address
        try:
            await self._lead_or_stand_by(chosen)
        except BaseException:
            http_socket.close()
            await self._grpc.stop(None)
            await parts.close()
            self._close_oidc()
            raise
        await self._health.update()
        await self._grpc.start()
        self._spawn(self._health.run())

        uses.readiness.warnings = tuple(await parts.capacity_warnings())
        for warning in uses.readiness.warnings:
            log.warning("%s", warning)
        rest = create_app(
            uses,
            self.auth,
            server.http_max_body_bytes,
            standby=self.leadership.problem,
            cookie_paths=COOKIE_PATHS,
        )
        install_web(rest, uses, self.auth)
        tls = self.tls
        factory = None if tls is None else lambda _config, _default: tls.ssl_context()
        mutual = tls is not None and tls.requires_client_certificate
        config = uvicorn.Config(
            ClientCertificateRequired(rest, parts.uses.audit) if mutual else rest,
            http=PresentedCertificateProtocol if mutual else JsonErrorsProtocol,
            host=server.host,
            port=server.http_port,
            log_level="warning",
            lifespan="off",
            ssl_context_factory=factory,
        )
        self._http = uvicorn.Server(config)
        if tls is not None:
            self._spawn(tls.follow())
        self._spawn(self._http.serve(sockets=[http_socket]))
        self._spawn(uses.audit.run())  # the audit log's writer and its retention
        # The history `csctl get jobs -a` lists, rendered (or read as kept) ahead once serving.
        self._spawn(cluster.listing.render_ahead(JobQuery(include_terminal=True)))

    async def _lead_or_stand_by(self, chosen: str) -> None:
        """Alone: adopt what runs, then act. Elected: a first round before serving."""
        self.office = Office(self.parts, self._spawn, self._tasks, self.stepped_down)
        if self.leadership.elected:
            await self.office.begin(self.settings, chosen, self._identity())
        else:
            await self.parts.recover()  # before serving: no call acts on a job not yet adopted
            self.office.run_loops()

    def _identity(self) -> str:
        """This coordinator's name in the lease: the pod name in a cluster; with the gRPC
        address when it listens on one (what a caller that reached a standby may dial)."""
        s = self.settings.server
        name = s.coordinator_id or f"{socket.gethostname()}-{os.getpid()}"
        if s.host in ("0.0.0.0", "::", ""):
            return name
        return f"{name} at {s.host}:{self.grpc_port}"

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.append(task)
        return task

    async def stop(self, grace: float = 5.0) -> None:
        """Drain the servers, stop the loops, leave the store consistent; replicas keep running."""
        if self._http is not None:
            self._http.should_exit = True
        if self._health is not None:  # probes and watchers hear of it before calls are refused
            await self._health.stop()
        if self._grpc is not None:
            await self._grpc.stop(grace)
        await self.parts.reconciler.drain(wait_seconds=grace)
        await self.parts.uses.audit.flush(final=True)  # what the doors recorded until they closed
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.office is not None:
            await self.office.end()  # the loops are stopped: a standby may take over now
        await asyncio.to_thread(self._close_oidc)
        await self.parts.close()

    def _close_oidc(self) -> None:
        """Stop a JWKS URL's fetcher (nothing for a file)."""
        if self._oidc is not None:
            self._oidc.close()


def _plaintext_allowed(host: str) -> None:
    try:
        check_plaintext_allowed(host)
    except TlsError as exc:
        raise StartupError(str(exc)) from None


def _serving_tls(settings: Settings) -> ServingTls | None:
    """The doors' TLS identity; None for plaintext (checked: only on a loopback address)."""
    if settings.tls.insecure:
        return None
    server = settings.server
    try:
        return ServingTls(settings.tls, server.host, server.coordinator_address)
    except TlsError as exc:
        raise StartupError(str(exc)) from None


def _with_coordinator_ca(
    secrets: Callable[[str, int], Mapping[str, str]], tls: ServingTls | None
) -> Callable[[str, int], Mapping[str, str]]:
    """A replica's environment: its job's tokens, and the CA it verifies the coordinator by."""
    if tls is None:
        return secrets
    ca = {COORDINATOR_CA_ENV: tls.ca_pem.decode()}
    return lambda job_id, attempt: {**secrets(job_id, attempt), **ca}


def _replica_identities(settings: Settings, tls: ServingTls | None) -> ReplicaIdentities | None:
    """What signs the replicas' certificates: the doors' CA, or with an operator's serving
    certificate the coordinator's own CA all the same; None when it serves plaintext (the data
    plane then keeps its token only)."""
    if tls is None:
        return None
    try:
        ca = tls.ca or CertificateAuthority.load_or_create(settings.tls.ca_dir)
    except PkiError as exc:
        raise StartupError(f"cannot sign the replicas' certificates: {exc}") from None
    return ReplicaIdentities(ca)


def _in_use(host: str, port: int, door: str, option: str) -> str:
    return (
        f"cannot listen on {host}:{port} ({door}): the port is in use; pick another with "
        f"{option} (0 = any free port)"
    )


def _check_free(host: str, port: int, door: str, option: str) -> None:
    """Refuse a taken port before grpcio tries it: its C core logs the failed bind on stderr,
    and a user should see one line."""
    if port == 0:
        return
    try:
        socket.create_server((host, port), reuse_port=False).close()
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise StartupError(
                f"cannot listen on {host}:{port} ({door}): {exc.strerror}"
            ) from None
        raise StartupError(_in_use(host, port, door, option)) from None


def listen_tcp(host: str, port: int) -> socket.socket:
    """A listening TCP socket whose accepted connections send small writes at once.

    asyncio sets TCP_NODELAY only on sockets created with proto IPPROTO_TCP, and
    `socket.create_server` makes them with proto 0, so uvicorn's connections kept Nagle's
    algorithm: its response headers and body are two writes, and the body waited for the
    client's delayed ACK (40 ms on Linux) on every keep-alive request. Linux copies the option
    from the listening socket to each accepted one.
    """
    try:
        sock = socket.create_server((host, port), reuse_port=False)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise StartupError(f"cannot listen on {host}:{port} (HTTP): {exc.strerror}") from None
        raise StartupError(_in_use(host, port, "HTTP", "--http-port")) from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock
