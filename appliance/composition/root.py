"""The one composition root: the store, the Context, the backend, every use case (each built
once), and the loops, from the settings. `appliance serve` (server/app.py) puts servers in
front of what `wire` builds; `appliance simulate` (simulation/runner.py) runs the same parts on
a virtual clock. Nothing else builds them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

from sqlalchemy import Engine

from appliance.backends.base import Backend, BackendUnavailable
from appliance.composition.backends import Making, StartupError, connect_kube, make_backend
from appliance.config import Settings, pool_of
from appliance.config.inventory import InventoryError
from appliance.domain.errors import InvalidSpec
from appliance.domain.leadership import LeaseLock
from appliance.domain.queues import resolve_quotas
from appliance.loops.reconciling import SWEEP_INTERVAL, Reconciler
from appliance.loops.scheduling import SchedulerLoop
from appliance.services.audit import AuditTrail, open_sink
from appliance.services.bulk_cancels import BulkCancel
from appliance.services.bus import JobBus
from appliance.services.context import Context
from appliance.services.data_dirs import DataDirs
from appliance.services.health import Readiness
from appliance.services.holds import HoldService
from appliance.services.job_watch import JobWatch
from appliance.services.jobs import Blocking, JobService
from appliance.services.leadership import Leadership
from appliance.services.limits import Limits
from appliance.services.limits_file import LimitsFile, LimitsFileError
from appliance.services.logs import LogService
from appliance.services.metrics_scrape import MetricsScrape
from appliance.services.model_dirs import ModelDirs
from appliance.services.nodes import NodeService
from appliance.services.queues import QueueService, apply_queues_file, pool_size
from appliance.services.replicas import ReplicaService
from appliance.services.reservations import ReservationService
from appliance.services.usage import UsageService
from appliance.services.use_cases import UseCases
from appliance.store.engine import StoreInUse, claim_sqlite, make_engine, migrate
from appliance.store.fence import Fence
from appliance.store.jobs import JobStore
from appliance.store.leadership import SqlLeaseLock

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Runtime:
    """How this process runs the parts: `serve` takes the defaults (wall clock, store threads,
    the settings' store); a simulation its virtual clock, store calls inline on the loop (no
    thread may be waited on there), and sweeps and progress reports less often."""

    clock: Callable[[], float] = time.time
    # Runs the store's calls (None: threads, one writer on SQLite, and a reader beside it).
    executor: ThreadPoolExecutor | None = None
    blocking: Blocking = asyncio.to_thread
    sweep_interval: float = SWEEP_INTERVAL
    report_interval: float = 0.5  # a simulated chief's progress reports, at most this often
    # Whether to claim the SQLite file (one coordinator per file) and warn of the queues.
    serving: bool = True


@dataclasses.dataclass
class Parts:
    """What `wire` built. The loops run only while this coordinator acts (`run_loops`)."""

    engine: Engine
    ctx: Context
    backend: Backend
    uses: UseCases
    reconciler: Reconciler
    scheduler: SchedulerLoop
    model_dirs: ModelDirs
    _executors: tuple[ThreadPoolExecutor, ...] = ()
    _claim: IO[str] | None = None

    @property
    def leadership(self) -> Leadership:
        return self.ctx.leadership

    def loops(self) -> list[Coroutine[Any, Any, None]]:
        """The scheduler and the reconciler's two loops, to run as tasks (then woken)."""
        self.ctx.bus.wake_scheduler()
        return [self.scheduler.run(), self.reconciler.run_events(), self.reconciler.run_sweeps()]

    async def recover(self) -> None:
        """Before acting: adopt the replicas still running (StartupError when the backend
        cannot say which)."""
        try:
            await self.reconciler.recover()
        except BackendUnavailable as exc:
            raise StartupError(
                f"cannot find the replicas still running, so cannot start: {exc}; "
                "start the coordinator again once the backend answers"
            ) from None

    async def take_office(self, epoch: int) -> None:
        """Raise the store's fence to `epoch`, then adopt what runs (raises when either fails:
        another coordinator then leads)."""
        ctx = self.ctx
        identity = ctx.leadership.identity
        if not await ctx.db(ctx.store.take_office, epoch, identity, ctx.clock()):
            raise RuntimeError(f"epoch {epoch} is not the newest in the store")
        ctx.leadership.take_office()
        await self.reconciler.recover()

    async def capacity_warnings(self) -> list[str]:
        """What to warn of at start: a pool whose largest job cannot fit where replicas run."""
        problem = await self.backend.fit_problem(self.ctx.store.pool())
        return [problem] if problem else []

    async def lease_lock(self, s: Settings, election: str) -> LeaseLock:
        """The election lease: in the backend's cluster, or the database."""
        name = s.leases.name
        if election != "kubernetes":
            return SqlLeaseLock(self.engine, name)
        lock = self.backend.lease_lock(name)
        if lock is None:  # replicas are local processes: a client for the lease alone
            from appliance.backends.kubernetes.lease import KubeLeaseLock

            lock = KubeLeaseLock(await connect_kube(s.kube), name)
        return lock

    async def close(self) -> None:
        """After the loops stopped: the backend (replicas keep running), the checkers, the
        store's threads and connections."""
        await self.backend.close()
        self.uses.jobs.close()
        self.uses.audit.close()
        for executor in self._executors:
            executor.shutdown(wait=True)
        self.engine.dispose()
        if self._claim is not None:
            self._claim.close()


async def wire(s: Settings, runtime: Runtime = Runtime(), *, elected: bool = False) -> Parts:
    """Build the store, the Context, the backend, the use cases and the loops from `s`
    (StartupError saying what to fix when they cannot be)."""
    s.store.data_dir.mkdir(parents=True, exist_ok=True)
    engine, claim, store = _open_store(s, runtime)
    try:
        leadership = Leadership(elected=elected)
        if leadership.elected:
            store.fence = Fence(leadership.epoch)
        _apply_pool(s, store, warn=runtime.serving)
        executors: tuple[ThreadPoolExecutor, ...] = ()
        executor, reader = runtime.executor, None
        if executor is None:
            sqlite = engine.dialect.name == "sqlite"
            executor = ThreadPoolExecutor(1 if sqlite else 8, thread_name_prefix="store")
            # SQLite: one writer thread, and a reader thread that WAL lets run beside it.
            reader = ThreadPoolExecutor(1, thread_name_prefix="store-read") if sqlite else None
            executors = (executor,) if reader is None else (executor, reader)
        ctx = Context(
            store, JobBus(), executor, clock=runtime.clock, reader=reader, leadership=leadership
        )
        parts = await _build(s, runtime, engine, ctx)
    except BaseException:
        engine.dispose()
        if claim is not None:
            claim.close()
        raise
    parts._executors, parts._claim = executors, claim
    return parts


def per_user_limits(s: Settings, ctx: Context, *, serving: bool) -> Limits:
    """The per-user limits of the settings (off in a simulation: a trace's users are not
    limited); StartupError naming the field of a limits file that cannot be used."""
    group = s.limits
    try:
        source = LimitsFile(group.file, enabled=group.enabled and serving)
    except LimitsFileError as exc:
        raise StartupError(str(exc)) from None

    async def count_waiting(user: str) -> dict[str, int]:
        return await ctx.read(ctx.store.waiting_jobs_of, user)

    async def count_held(user: str) -> int:
        return (await ctx.read(ctx.store.systems_held, user)).get(user, 0)

    return Limits(source, count_waiting, ctx.metrics, count_held=count_held)


async def _build(s: Settings, runtime: Runtime, engine: Engine, ctx: Context) -> Parts:
    restarts, preemption = s.restarts, s.preemption
    sink = _audit_sink(s)  # before anything that would need closing if it cannot be opened
    replicas = ReplicaService(ctx)
    making = Making(replicas, runtime.clock, runtime.report_interval)
    backend = await make_backend(s, making)
    ctx.estimates.default_step_seconds = backend.simulated_step_seconds
    dirs = s.model_dirs
    model_dirs = ModelDirs(dirs.root, dirs.allowed, check_paths=backend.writes_model_dirs)
    queues = QueueService(ctx, s.scheduler)
    nodes = NodeService(ctx, restarts, preemption)
    data_dirs = DataDirs(model_dirs, s.data_dirs.allowed, shared=backend.shares_data_dirs)
    limits = per_user_limits(s, ctx, serving=runtime.serving)
    jobs = JobService(
        ctx, model_dirs, queues, blocking=runtime.blocking,
        chooses_checkpoints=backend.writes_model_dirs, data_dirs=data_dirs,
        limits=limits if runtime.serving else None,
    )  # fmt: skip
    uses = UseCases(
        jobs=jobs,
        replicas=replicas,
        nodes=nodes,
        usage=UsageService(ctx),
        queues=queues,
        bulk_cancels=BulkCancel(ctx),
        job_watch=JobWatch(ctx),
        logs=LogService(ctx, backend),
        metrics=MetricsScrape(ctx),
        readiness=Readiness(ctx, backend),
        audit=AuditTrail(ctx, s.audit, sink),
        limits=limits,
        arrays=jobs.arrays,
        holds=HoldService(ctx, jobs.arrays, preemption.grace_seconds),
        reservations=ReservationService(ctx),
    )
    reconciler = Reconciler(
        ctx, backend, replicas, runtime.sweep_interval, model_dirs,
        nodes=nodes, lifetimes=s.replicas, restarts=restarts, preemption=preemption,
        time_limits=s.time_limits,
    )  # fmt: skip
    scheduler = SchedulerLoop(ctx, s.scheduler, preemption, limits)
    return Parts(engine, ctx, backend, uses, reconciler, scheduler, model_dirs)


def _audit_sink(s: Settings) -> IO[str] | None:
    """The audit log's JSON-lines copy, if the settings name one (StartupError if it cannot be
    opened)."""
    try:
        return open_sink(s.audit.file)
    except OSError as exc:
        raise StartupError(f"cannot open the audit file {s.audit.file}: {exc}") from None


def _open_store(s: Settings, runtime: Runtime) -> tuple[Engine, IO[str] | None, JobStore]:
    engine = make_engine(s.store.url)
    claim = None
    if runtime.serving:
        try:  # SQLite: one coordinator per file
            claim = claim_sqlite(engine)
        except StoreInUse as exc:
            engine.dispose()
            raise StartupError(str(exc)) from None
    try:
        migrate(engine)
    except BaseException:
        engine.dispose()
        if claim is not None:
            claim.close()
        raise
    return engine, claim, JobStore(engine)


def _apply_pool(s: Settings, store: JobStore, *, warn: bool) -> None:
    """The pool as the settings name it; the queues file if it changed (refusing to start on
    one the pool cannot hold); with `warn`, a warning when the stored queues' quotas exceed a
    pool that shrank (an admin fixes that with csctl queue set while the appliance runs)."""
    inventory = s.inventory
    try:
        store.sync_pool(pool_of(inventory))
    except InventoryError as exc:
        raise StartupError(str(exc)) from None
    pool = store.pool()
    if inventory.queues_file is not None:
        try:
            applied = apply_queues_file(store, inventory.queues_file, pool)
        except InvalidSpec as exc:
            raise StartupError(exc.message) from None
        if applied.applied and warn:
            log.info("applied the queues file %s", inventory.queues_file)
        for name in applied.kept if warn else ():
            log.warning("queue %s is not in the queues file but has jobs: kept with no "
                        "quota until they end", name)  # fmt: skip
    if not warn:
        return
    try:
        resolve_quotas(store.queue_specs(), *pool_size(pool))
    except InvalidSpec as exc:
        log.warning("%s: the default queue gets no quota until the queues are changed",
                    exc.message)  # fmt: skip
