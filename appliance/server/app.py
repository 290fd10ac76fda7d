"""Composition root: build the store, backend, loops and servers from Settings; run; drain.

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
import logging
import os
import socket
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import IO, TYPE_CHECKING

import grpc
import uvicorn

from appliance._proto.v1 import cluster_pb2_grpc, control_pb2_grpc
from appliance.backends.base import Backend, BackendUnavailable
from appliance.backends.local import LocalBackend
from appliance.config import InventoryError, Settings
from appliance.domain.errors import InvalidSpec
from appliance.domain.inventory import Node
from appliance.domain.leadership import LeaseLock
from appliance.domain.listing import JobQuery
from appliance.domain.queues import resolve_quotas
from appliance.loops.leadership import LeaderElector
from appliance.loops.reconciling import Reconciler
from appliance.loops.scheduling import SchedulerLoop
from appliance.server.auth import Authenticator
from appliance.server.grpc.authn import CLUSTER, CONTROL, Authentication
from appliance.server.grpc.cluster import ClusterServicer
from appliance.server.grpc.control import ReplicaControlServicer
from appliance.server.grpc.health import HealthReporter, serve_health_and_reflection
from appliance.server.grpc.metrics import CallMetrics
from appliance.server.grpc.standby import StandbyRefusal
from appliance.server.replica_tokens import ReplicaTokens
from appliance.server.rest.app import create_app
from appliance.server.web.app import COOKIE_PATHS, install_web
from appliance.services.bus import JobBus
from appliance.services.context import Context
from appliance.services.health import Readiness
from appliance.services.jobs import JobService
from appliance.services.leadership import Leadership
from appliance.services.logs import LogService
from appliance.services.queues import apply_queues_file, pool_size
from appliance.services.replicas import ReplicaService
from appliance.store.engine import StoreInUse, claim_sqlite, make_engine, migrate
from appliance.store.fence import Fence
from appliance.store.jobs import JobStore
from appliance.store.leadership import SqlLeaseLock

if TYPE_CHECKING:
    from appliance.backends.kubernetes import KubeApi, KubernetesBackend

log = logging.getLogger(__name__)


class StartupError(Exception):
    """The coordinator cannot start with these settings; the message says what to fix."""


class Coordinator:
    """One coordinator process: gRPC + HTTP servers, scheduler and reconciler loops."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.grpc_port = 0
        self.http_port = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._grpc: grpc.aio.Server | None = None
        self._http: uvicorn.Server | None = None
        self._store_claim: IO[str] | None = None
        self._health: HealthReporter | None = None
        self._election: asyncio.Task[None] | None = None
        self.elector: LeaderElector | None = None
        # Set when this coordinator lost its leadership lease: its owner ends the process.
        self.stepped_down = asyncio.Event()

    @property
    def address(self) -> str:
        return f"{self.settings.host}:{self.grpc_port}"

    async def start(self) -> None:
        s = self.settings
        s.data_dir.mkdir(parents=True, exist_ok=True)
        election = s.election
        if election != "off" and not s.sqlalchemy_url.startswith("postgresql"):
            raise StartupError(
                f"leader election ({election}) needs PostgreSQL as the store; set "
                "APPLIANCE_DATABASE_URL, or run one coordinator on SQLite"
            )
        self.engine = make_engine(s.sqlalchemy_url)
        try:  # SQLite: one coordinator per file
            self._store_claim = claim_sqlite(self.engine)
        except StoreInUse as exc:
            self.engine.dispose()
            raise StartupError(str(exc)) from None
        migrate(self.engine)
        store = JobStore(self.engine)
        self.leadership = Leadership(elected=election != "off")
        if self.leadership.elected:
            store.fence = Fence(self.leadership.epoch)
        try:
            store.sync_pool(s.pool())
        except InventoryError as exc:
            raise StartupError(str(exc)) from None
        self._apply_queues(store)
        sqlite = self.engine.dialect.name == "sqlite"
        self.executor = ThreadPoolExecutor(1 if sqlite else 8, thread_name_prefix="store")
        # SQLite: one writer thread, and a reader thread that WAL lets run beside it.
        self.reader = ThreadPoolExecutor(1, thread_name_prefix="store-read") if sqlite else None
        self.ctx = Context(
            settings=s,
            store=store,
            bus=JobBus(),
            executor=self.executor,
            reader=self.reader,
            leadership=self.leadership,
        )
        self.jobs = JobService(self.ctx)
        replicas = ReplicaService(self.ctx)

        # The replicas' coordinator address is completed once the gRPC port is known.
        # StartupError when it cannot be configured; simulated replicas call `replicas`.
        self.backend = await make_backend(s, replicas)
        logs = LogService(self.ctx, self.backend)
        self.auth = Authenticator.from_file(s.auth_tokens_file)
        # Replicas present their job's token to us with authentication on, and its data-plane
        # token to each other always (replica_tokens.py).
        try:
            tokens = ReplicaTokens.from_key_file(s.replica_key_file, control=self.auth.enabled)
        except (OSError, ValueError) as exc:
            await self.backend.close()
            raise StartupError(f"cannot use the replica token key: {exc}") from None
        self.backend.replica_secrets = tokens.environment
        control_tokens = tokens if self.auth.enabled else None
        self._grpc = grpc.aio.server(
            interceptors=[
                CallMetrics(self.ctx.metrics),  # first: it counts what the others refuse
                StandbyRefusal(self.leadership.problem),
                Authentication(self.auth, control_tokens),
            ]
        )
        cluster = ClusterServicer(self.jobs, logs)
        cluster_pb2_grpc.add_ClusterServiceServicer_to_server(cluster, self._grpc)
        control_pb2_grpc.add_ReplicaControlServicer_to_server(
            ReplicaControlServicer(replicas), self._grpc
        )
        readiness = Readiness(self.ctx, self.backend)
        services = (CLUSTER, CONTROL)
        self._health = serve_health_and_reflection(self._grpc, readiness.problem, services)
        self.grpc_port = self._grpc.add_insecure_port(f"{s.host}:{s.grpc_port}")
        self.backend.coordinator_address = s.coordinator_address or f"127.0.0.1:{self.grpc_port}"
        self.reconciler = Reconciler(
            self.ctx, self.backend, replicas, model_dirs=self.jobs.model_dirs
        )
        if self.leadership.elected:
            self.leadership.identity = identity = self._identity()
            lock = await self._lease_lock(election)
            self.elector = LeaderElector(lock, self.leadership, s.lease_timing)
            # A first round before serving: a lone coordinator (or one whose lease is free)
            # adopts before any call, as without election; others serve as standbys.
            won = await self._first_round()
            if won and not await self._take_office(self.elector.epoch or 0):
                await self.backend.close()
                raise StartupError("elected, but could not take office; see the log")
            self._election = asyncio.get_running_loop().create_task(self._campaign(won))
            if not won:
                log.info("standing by for the %s as %s", lock.description, identity)
        else:
            try:  # before serving: no call acts on a job not yet adopted
                await self.reconciler.recover()
            except BackendUnavailable as exc:
                await self.backend.close()
                raise StartupError(
                    f"cannot find the replicas still running, so cannot start: {exc}; "
                    "start the coordinator again once the backend answers"
                ) from None
            self._run_loops()
        await self._health.update()
        await self._grpc.start()
        self._spawn(self._health.run())

        readiness.warnings = tuple(await capacity_warnings(s, self.backend, store.pool()))
        for warning in readiness.warnings:
            log.warning("%s", warning)
        rest = create_app(
            self.jobs,
            readiness,
            self.auth,
            s.http_max_body_bytes,
            standby=self.leadership.problem,
            logs=logs,
            cookie_paths=COOKIE_PATHS,
        )
        install_web(rest, self.jobs, logs, self.auth)
        config = uvicorn.Config(
            rest, host=s.host, port=s.http_port, log_level="warning", lifespan="off"
        )
        self._http = uvicorn.Server(config)
        sock = listen_tcp(s.host, s.http_port)
        self.http_port = sock.getsockname()[1]
        self._spawn(self._http.serve(sockets=[sock]))
        # The history `csctl get jobs -a` lists, rendered (or read as kept) ahead once serving.
        self._spawn(cluster.listing.render_ahead(JobQuery(include_terminal=True)))

    def _run_loops(self) -> None:
        self._spawn(SchedulerLoop(self.ctx).run())
        self._spawn(self.reconciler.run_events())
        self._spawn(self.reconciler.run_sweeps())
        self.ctx.bus.wake_scheduler()

    # ---- leader election ----------------------------------------------------------------------

    def _identity(self) -> str:
        """This coordinator's name in the lease: the pod name in a cluster; with the gRPC
        address when it listens on one (what a caller that reached a standby may dial)."""
        s = self.settings
        name = s.coordinator_id or f"{socket.gethostname()}-{os.getpid()}"
        if s.host in ("0.0.0.0", "::", ""):
            return name
        return f"{name} at {s.host}:{self.grpc_port}"

    async def _lease_lock(self, election: str) -> LeaseLock:
        """The lease in the cluster (through the Kubernetes client module) or the database."""
        s = self.settings
        if election != "kubernetes":
            return SqlLeaseLock(self.engine, s.lease_name)
        from appliance.backends.kubernetes.lease import KubeLeaseLock

        api = getattr(self.backend, "api", None)
        if api is None:  # replicas are local processes: a client for the lease alone
            api = await connect_kube(s)
        return KubeLeaseLock(api, s.lease_name)

    async def _first_round(self) -> bool:
        assert self.elector is not None
        try:
            timeout = self.settings.lease_timing.renew_deadline
            async with asyncio.timeout(timeout):
                return await self.elector.try_acquire_or_renew()
        except Exception as exc:
            log.warning("first leader election round failed: %s", exc)
            return False

    async def _campaign(self, won: bool) -> None:
        """Stand by until elected, take office, lead; on losing the lease stop acting at once."""
        assert self.elector is not None
        try:
            await self.elector.run(self._elected, won=won)
        except Exception:
            log.exception("leader election failed")
        finally:  # lost, failed, or cancelled because taking office failed
            self.leadership.step_down()
            for task in self._tasks:
                task.cancel()
            self.stepped_down.set()

    def _elected(self, epoch: int) -> None:
        self._spawn(self._take_office(epoch))

    async def _take_office(self, epoch: int) -> bool:
        """Raise the fence to `epoch`, adopt what runs, then schedule and reconcile."""
        ctx = self.ctx
        identity = self.leadership.identity
        try:
            if not await ctx.db(ctx.store.take_office, epoch, identity, ctx.clock()):
                raise RuntimeError(f"epoch {epoch} is not the newest in the store")
            self.leadership.take_office()
            await self.reconciler.recover()
        except Exception as exc:  # e.g. the backend cannot list what runs: let another lead
            log.error("cannot take office under epoch %d (%s): stepping down", epoch, exc)
            if self._election is not None:
                self._election.cancel()
            return False
        self._run_loops()
        self.leadership.serve()
        log.info("leading under epoch %d: scheduling and reconciling", epoch)
        return True

    def _apply_queues(self, store: JobStore) -> None:
        """Apply the queues file if it changed (refusing to start on one the pool cannot
        hold); warn when the stored queues' quotas exceed a pool that shrank (an admin fixes
        that with csctl queue set while the appliance runs)."""
        pool = store.pool()
        if self.settings.queues_file is not None:
            try:
                applied = apply_queues_file(store, self.settings.queues_file, pool)
            except InvalidSpec as exc:
                raise StartupError(exc.message) from None
            if applied.applied:
                log.info("applied the queues file %s", self.settings.queues_file)
            for name in applied.kept:
                log.warning("queue %s is not in the queues file but has jobs: kept with no "
                            "quota until they end", name)  # fmt: skip
        try:
            resolve_quotas(store.queue_specs(), *pool_size(pool))
        except InvalidSpec as exc:
            log.warning("%s: the default queue gets no quota until the queues are changed",
                        exc.message)  # fmt: skip

    def _spawn(self, coro: object) -> None:
        self._tasks.append(asyncio.get_running_loop().create_task(coro))  # type: ignore[arg-type]

    async def stop(self, grace: float = 5.0) -> None:
        """Drain the servers, stop the loops, leave the store consistent; replicas keep running."""
        if self._http is not None:
            self._http.should_exit = True
        if self._health is not None:  # probes and watchers hear of it before calls are refused
            await self._health.stop()
        if self._grpc is not None:
            await self._grpc.stop(grace)
        await self.reconciler.drain(wait_seconds=grace)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._election is not None:
            self._election.cancel()
            await asyncio.gather(self._election, return_exceptions=True)
            assert self.elector is not None
            await self.elector.release()  # the loops are stopped: a standby may take over now
        await self.backend.close()
        self.jobs.close()
        self.executor.shutdown(wait=True)
        if self.reader is not None:
            self.reader.shutdown(wait=True)
        self.engine.dispose()
        if self._store_claim is not None:
            self._store_claim.close()


async def make_backend(s: Settings, replicas: ReplicaService) -> Backend:
    """Local processes, pods through the Kubernetes API, or simulated replicas calling
    `replicas` in process (the last two imported only when chosen)."""
    if s.backend == "sim":
        from appliance.backends.sim import FailurePlan, SimBackend

        failures = FailurePlan(s.sim_failure_rate, s.sim_failures, s.sim_seed)
        return SimBackend(
            replicas, step_seconds=s.sim_step_seconds, failures=failures, clock=replicas.ctx.clock
        )
    if s.backend == "kubernetes":
        return kube_backend(s, await connect_kube(s))
    return LocalBackend(
        s.data_dir,
        "",
        grace_seconds=s.cancel_grace_seconds,
        orphan_timeout=s.worker_orphan_timeout,
    )


def kube_backend(s: Settings, api: KubeApi) -> KubernetesBackend:
    """Replica pods through `api`, as the settings say."""
    from appliance.backends.kubernetes import (
        ROLE_REQUESTS,
        KubernetesBackend,
        PodTemplate,
        Resources,
    )

    defaults, chosen = ROLE_REQUESTS, s.kube_replica_resources
    requests = {
        role: Resources(
            getattr(chosen, role.value).cpu or default.cpu,
            getattr(chosen, role.value).memory or default.memory,
        )
        for role, default in defaults.items()
    }
    template = PodTemplate(
        namespace=api.namespace,
        image=s.kube_image,
        image_pull_policy=s.kube_image_pull_policy,
        coordinator_address=s.coordinator_address,
        grace_seconds=s.cancel_grace_seconds,
        orphan_timeout=s.worker_orphan_timeout,
        model_dirs=str(s.model_dirs.resolve()),
        model_dirs_claim=s.kube_model_dirs_claim,
        memory_limit=s.kube_replica_memory_limit,
        requests=requests,
    )
    return KubernetesBackend(
        api,
        template,
        s.data_dir / "jobs",
        clean_pod_policy=s.kube_clean_pod_policy,
        pending_timeout=s.kube_pending_timeout_seconds,
        watch_timeout_seconds=s.kube_watch_timeout_seconds,
    )


async def capacity_warnings(s: Settings, backend: Backend, pool: Sequence[Node]) -> list[str]:
    """What the coordinator warns of at start: on Kubernetes, a pool whose largest job cannot
    fit the nodes (its pods would wait for the pending timeout, then fail the job)."""
    if s.backend != "kubernetes":
        return []
    from appliance.backends.kubernetes import KubernetesBackend

    assert isinstance(backend, KubernetesBackend)
    problem = await backend.fit_problem(pool)
    return [problem] if problem else []


async def connect_kube(s: Settings) -> KubeApi:
    """A client of the Kubernetes API from the settings (StartupError when not configured)."""
    from appliance.backends.kubernetes import KubeApi, KubeConfigError

    try:
        return await KubeApi.connect(
            kubeconfig=s.kube_config,
            namespace=s.kube_namespace,
            request_timeout=s.kube_request_timeout_seconds,
        )
    except KubeConfigError as exc:
        raise StartupError(str(exc)) from None


def listen_tcp(host: str, port: int) -> socket.socket:
    """A listening TCP socket whose accepted connections send small writes at once.

    asyncio sets TCP_NODELAY only on sockets created with proto IPPROTO_TCP, and
    `socket.create_server` makes them with proto 0, so uvicorn's connections kept Nagle's
    algorithm: its response headers and body are two writes, and the body waited for the
    client's delayed ACK (40 ms on Linux) on every keep-alive request. Linux copies the option
    from the listening socket to each accepted one.
    """
    sock = socket.create_server((host, port), reuse_port=False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock
