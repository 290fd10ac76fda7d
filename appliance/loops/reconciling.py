"""The reconciler: launches scheduled jobs, turns replica exits into job phases, tears down.

It decides nothing about admission (the scheduler does) and writes phases only through
Context.set_phase. Every step is idempotent, so a pass may be repeated or interrupted safely;
`recover` re-finds running replicas after a coordinator restart. Replica events (starts and
ends) are handled by its part in loops/replica_events.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from pathlib import Path

from appliance.backends.base import Backend, BackendUnavailable, ReplicaEvent, ReplicaEventKind
from appliance.config import (
    PreemptionSettings,
    ReplicaSettings,
    RestartSettings,
    TimeLimitSettings,
)
from appliance.domain.job import Job, ReplicaPhase
from appliance.domain.phases import Phase
from appliance.domain.plan import CHIEF_REPLICA
from appliance.domain.reasons import ReasonCode, said
from appliance.domain.requeues import RequeueRequest
from appliance.domain.restarts import EXIT_PEER_FAILED
from appliance.loops.replica_events import ReplicaEventHandling
from appliance.loops.requeuing import Requeuer
from appliance.loops.settling import ConsequentFailures
from appliance.loops.time_limits import TimeLimits
from appliance.services.context import Context
from appliance.services.model_dirs import ModelDirs
from appliance.services.nodes import NodeService
from appliance.services.replicas import ReplicaService
from appliance.store.jobs import JobStore

log = logging.getLogger(__name__)
SWEEP_INTERVAL = 1.0


class Reconciler(ReplicaEventHandling):
    def __init__(
        self,
        ctx: Context,
        backend: Backend,
        replicas: ReplicaService,
        sweep_interval: float = SWEEP_INTERVAL,
        model_dirs: ModelDirs | None = None,
        *,
        nodes: NodeService | None = None,
        lifetimes: ReplicaSettings = ReplicaSettings(),
        restarts: RestartSettings = RestartSettings(),
        preemption: PreemptionSettings = PreemptionSettings(),
        time_limits: TimeLimitSettings = TimeLimitSettings(),
    ) -> None:
        """`sweep_interval`: seconds between the timed checks of leases, timeouts and nodes
        (a simulation on a virtual clock makes them rarer); `model_dirs`: the owners'
        directories, made sure of before a job's replicas start (the submits' ModelDirs);
        `nodes`: the node use cases the doors call (else one of its own)."""
        self.ctx = ctx
        self.model_dirs = model_dirs
        self.backend = backend
        self.sweep_interval = sweep_interval
        self.replicas = replicas
        self.nodes = nodes or NodeService(ctx, restarts, preemption)
        self.lifetimes = lifetimes
        # Jobs whose replicas this coordinator started or adopted and has not torn down.
        self.active: set[str] = set()
        self._teardowns: dict[str, asyncio.Task[None]] = {}
        # Jobs whose attempt is being torn down to run again (store/requeues.py).
        self.requeues = Requeuer(ctx, backend, self.active, restarts, preemption, time_limits)
        self.time_limits = TimeLimits(ctx, time_limits)
        self._recovered_at = 0.0
        self._consequences = ConsequentFailures(restarts.peer_failure_settle_seconds)

    # ---- restart ----------------------------------------------------------------------------

    async def recover(self) -> None:
        """Adopt what still runs; settle jobs whose replicas ended while we were away."""
        self._recovered_at = self.ctx.clock()
        live = await self.backend.adopt()
        store = self.ctx.store
        holding = await self.ctx.db(
            store.jobs_in, [Phase.SCHEDULED, Phase.INITIALIZING, Phase.RUNNING]
        )
        stopping = {r.job_id for r in await self.ctx.db(store.requeue_requests)}
        for job in holding:
            alive = live.pop(job.id, set())
            expected = {r.name for r in await self.ctx.db(store.replicas, job.id)}
            self.active.add(job.id)
            if job.phase is Phase.SCHEDULED or job.id in stopping:
                continue  # the sweep launches what is missing, or finishes the requeue
            missing = sorted(expected - alive)
            if not missing:
                log.info("adopted %s (%d replicas)", job.id, len(alive))
                continue
            await self._settle_while_away(job.id, job.phase, missing)
        for job_id in live:  # replicas of jobs that ended while we were away
            self.active.add(job_id)
        self.ctx.bus.wake_reconciler()

    async def _settle_while_away(self, job_id: str, phase: Phase, missing: list[str]) -> None:
        """Replicas ended while no coordinator watched: decide from the exit codes they left."""
        codes = self.backend.exit_codes(job_id)
        failed = {name: code for name, code in codes.items() if code != 0}
        if not failed and codes.get(CHIEF_REPLICA) == 0 and phase is Phase.RUNNING:
            reason = said(ReasonCode.COMPLETED, away=True)
            await self.ctx.set_phase(job_id, Phase.SUCCEEDED, reason, expected=phase)
            return
        if failed:
            # A cause before its consequences (the chief ended because a CS-2 did).
            name, code = min(failed.items(), key=lambda f: (f[1] == EXIT_PEER_FAILED, f[0]))
            error = await self.backend.away_error(job_id, name)
            reason = said(
                ReasonCode.REPLICA_FAILED, replica=name, exit_code=code, away=True, error=error
            )
            ended = ReplicaEvent(
                job_id, name, ReplicaEventKind.EXITED, exit_code=code, last_error=error
            )
        else:
            # Gone without a trace: killed with their host, or (sim backend) with the
            # coordinator's process. Lost, then: retryable, as a pod lost with its node is.
            reason = said(ReasonCode.REPLICAS_LOST, replicas=missing)
            ended = ReplicaEvent(job_id, missing[0], ReplicaEventKind.EXITED, lost=True)
        final = await self.requeues.restart_if_allowed(ended, reason)
        if final is not None:
            await self.ctx.set_phase(job_id, Phase.FAILED, final, expected=phase)

    # ---- loops ------------------------------------------------------------------------------

    async def run_sweeps(self) -> None:
        wanted = self.ctx.bus.reconcile_wanted
        loop = asyncio.get_running_loop()
        last_timed = loop.time()
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.sweep_interval):  # not wait_for: see scheduling
                    await wanted.wait()
            wanted.clear()
            # Leases and timeouts are checked once a second, not on every wake-up: a burst of
            # phase changes (bulk cancel) must not scan every active job each time.
            timed = loop.time() - last_timed >= self.sweep_interval
            if timed:
                last_timed = loop.time()
            try:
                await self.sweep(timed=timed)
            except Exception:
                log.exception("reconciler sweep failed")

    async def sweep(self, *, timed: bool = True) -> None:
        """Carry out requeues, tear down finished jobs, launch scheduled ones; with `timed`,
        also take jobs off nodes out of service, cancel jobs whose lease expired and fail jobs
        stuck initializing."""
        store = self.ctx.store
        # The one write first, on the writer; then the reads on a reader thread: they see it
        # and every write whose call returned (a launch's INITIALIZING among them), and the
        # writer, which every registration, progress report and exit queues for, is spared
        # reads of every active job's phase and every SCHEDULED job's view on each sweep.
        for withdrawn in await self.ctx.db(store.withdraw_moot_preemptions, self.ctx.clock()):
            self.ctx.bus.publish(withdrawn)
        view = await self.ctx.read(_sweep_view, store, list(self.active))
        requests = view.requests
        self.requeues.when_ready(requests, now=self.ctx.clock())
        for job_id, phase in view.phases.items():
            # Replicas of a job back in the queue are an earlier attempt's (found after a
            # restart): they go too, before any next attempt is launched.
            requeued = phase is Phase.QUEUED and job_id not in self.requeues.tasks
            if phase.terminal or requeued:
                self._start_teardown(job_id, failed=phase is Phase.FAILED)
        # Jobs scheduled together start together (a backend bounds its own API concurrency).
        # Not one whose earlier attempt is still being torn down, nor one being requeued: that
        # teardown would stop the new replicas, or the requeue strand them.
        stopping = {r.job_id for r in requests}
        busy = self._teardowns.keys() | self.requeues.tasks.keys() | stopping
        await asyncio.gather(*(self._launch(job) for job in view.scheduled if job.id not in busy))
        now = self.ctx.clock()
        if not timed:
            return
        for held in self._consequences.due(now):
            found = await self.ctx.db(store.stop_state, held.event.job_id)
            if (
                found is not None
                and not found.phase.terminal
                and not self._stale(held.event, found)
            ):
                await self._fail_or_restart(held.event, held.reason)
        await self.nodes.take_away_stranded()
        await self.time_limits.enforce()
        for job in await self.ctx.db(store.expired_leases, now):
            assert job.lease is not None
            reason = said(
                ReasonCode.LEASE_EXPIRED, holder=job.lease.holder, seconds=job.lease.lease_seconds
            )
            await self.ctx.set_phase(job.id, Phase.CANCELLED, reason, expected=job.phase)
        # Replicas may wait to start as long as the backend lets them (a pod pending for a
        # node): the backend fails such a job first, with its own reason, not this timeout.
        limit = self.lifetimes.init_timeout_seconds + self.backend.start_timeout
        for job in await self.ctx.db(store.jobs_in, [Phase.INITIALIZING]):
            if job.id in stopping or job.id in self.requeues.tasks:
                continue  # being requeued: its replicas are going, not late
            # After a restart the clock starts again: replicas could not register meanwhile.
            since = max(job.updated_at, self._recovered_at)
            if now - since > limit:
                waiting = [
                    r.name
                    for r in await self.ctx.db(store.replicas, job.id)
                    if r.phase is not ReplicaPhase.READY
                ]
                reason = said(ReasonCode.NOT_READY, seconds=limit, replicas=waiting)
                await self.ctx.set_phase(job.id, Phase.FAILED, reason, expected=Phase.INITIALIZING)

    async def _launch(self, job: Job) -> None:
        job_id = job.id
        if not self.ctx.leadership.acting():  # paused past the lease: another leader launches
            log.warning("not launching %s: this coordinator no longer leads", job_id)
            return
        self.active.add(job_id)
        try:
            if self.model_dirs is not None and self.backend.writes_model_dirs:
                # Made at the owner's first submit; made again if it went since.
                await asyncio.to_thread(self.model_dirs.ensure_owner_dir, Path(job.spec.model_dir))
            await self.backend.launch(job, job.replicas)
        except BackendUnavailable as exc:
            # Not the job's fault: keep it SCHEDULED, say why, retry on the next sweep; fail it
            # only when this lasts longer than the init timeout.
            waited = self.ctx.clock() - job.updated_at
            if waited <= self.lifetimes.init_timeout_seconds:
                log.warning("launching %s: %s; retrying", job_id, exc)
                await self.ctx.db(
                    self.ctx.store.set_condition,
                    job_id,
                    Phase.SCHEDULED,
                    said(ReasonCode.BACKEND, error=str(exc)),
                )
                return
            await self.ctx.set_phase(
                job_id,
                Phase.FAILED,
                said(ReasonCode.LAUNCH_FAILED, seconds=waited, error=str(exc)),
                expected=Phase.SCHEDULED,
            )
            return
        except Exception as exc:
            log.exception("launching %s failed", job_id)
            await self.ctx.set_phase(
                job_id,
                Phase.FAILED,
                said(ReasonCode.LAUNCH_FAILED, error=str(exc)),
                expected=Phase.SCHEDULED,
            )
            return
        change = await self.ctx.set_phase(
            job_id,
            Phase.INITIALIZING,
            said(ReasonCode.STARTED, replicas=len(job.replicas)),
            expected=Phase.SCHEDULED,
        )
        if change.applied:
            await self.replicas.start_if_all_ready(job_id)

    async def drain(self, wait_seconds: float) -> None:
        """Wait for teardowns and restarts under way (a coordinator stopping lets them
        finish)."""
        pending = [*self._teardowns.values(), *self.requeues.tasks.values()]
        if pending:
            await asyncio.wait(pending, timeout=wait_seconds)

    def _start_teardown(self, job_id: str, *, failed: bool) -> None:
        if job_id in self._teardowns:
            return

        async def teardown() -> None:
            try:
                if not self.ctx.leadership.acting():
                    return  # the leader tears down; this coordinator stopped leading
                await self.backend.teardown(job_id, failed=failed)
                self.active.discard(job_id)
            except Exception as exc:  # the job stays active: the next sweep tries again
                log.warning("tearing down %s failed: %s; retrying", job_id, exc)
            finally:
                self._teardowns.pop(job_id, None)

        self._teardowns[job_id] = asyncio.get_running_loop().create_task(teardown())


@dataclasses.dataclass(frozen=True)
class _SweepView:
    requests: list[RequeueRequest]
    phases: dict[str, Phase]  # of the jobs this coordinator runs
    scheduled: list[Job]  # every SCHEDULED job, full view


def _sweep_view(store: JobStore, active: list[str]) -> _SweepView:
    """What a sweep reads, in one trip to a reader thread (each read as before)."""
    requests = store.requeue_requests()
    phases = store.phases_of(active)
    scheduled = store.get_jobs(store.job_ids_in([Phase.SCHEDULED]))
    return _SweepView(requests, phases, scheduled)
