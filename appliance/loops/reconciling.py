"""The reconciler: launches scheduled jobs, turns replica exits into job phases, tears down.

It decides nothing about admission (the scheduler does) and writes phases only through
Context.set_phase. Every step is idempotent, so a pass may be repeated or interrupted safely;
`recover` re-finds running replicas after a coordinator restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Sequence

from appliance.backends.base import Backend, BackendUnavailable, ReplicaEvent, ReplicaEventKind
from appliance.domain.job import Job, JobEvent, ReplicaPhase
from appliance.domain.phases import Phase
from appliance.domain.restarts import EXIT_PEER_FAILED, resume_point
from appliance.loops.requeuing import Requeuer
from appliance.loops.settling import ConsequentFailures
from appliance.services.context import Context
from appliance.services.nodes import NodeService
from appliance.services.replicas import ReplicaService
from appliance.store.jobs import JobStore
from appliance.store.replica_batches import CHIEF, CHIEF_FINISHED, ReplicaExit, exit_phase
from appliance.store.requeues import RequeueRequest, StopState

log = logging.getLogger(__name__)
SWEEP_INTERVAL = 1.0


class Reconciler:
    def __init__(
        self,
        ctx: Context,
        backend: Backend,
        replicas: ReplicaService,
        sweep_interval: float = SWEEP_INTERVAL,
    ) -> None:
        """`sweep_interval`: seconds between the timed checks of leases, timeouts and nodes
        (a simulation on a virtual clock makes them rarer)."""
        self.ctx = ctx
        self.backend = backend
        self.sweep_interval = sweep_interval
        self.replicas = replicas
        self.nodes = NodeService(ctx)
        # Jobs whose replicas this coordinator started or adopted and has not torn down.
        self.active: set[str] = set()
        self._teardowns: dict[str, asyncio.Task[None]] = {}
        # Jobs whose attempt is being torn down to run again (store/requeues.py).
        self.requeues = Requeuer(ctx, backend, self.active)
        self._recovered_at = 0.0
        self._consequences = ConsequentFailures(ctx.settings.peer_failure_settle_seconds)

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
        if not failed and codes.get(CHIEF) == 0 and phase is Phase.RUNNING:
            reason = "chief finished all steps while the coordinator was away"
            await self.ctx.set_phase(job_id, Phase.SUCCEEDED, reason, expected=phase)
            return
        if failed:
            # A cause before its consequences (the chief ended because a CS-2 did).
            name, code = min(failed.items(), key=lambda f: (f[1] == EXIT_PEER_FAILED, f[0]))
            reason = f"replica {name} exited with exit code {code} while the coordinator was away"
            ended = ReplicaEvent(job_id, name, ReplicaEventKind.EXITED, exit_code=code)
        else:
            # Gone without a trace: killed with their host, or (sim backend) with the
            # coordinator's process. Lost, then: retryable, as a pod lost with its node is.
            reason = "replicas gone after a coordinator restart: " + ", ".join(missing)
            ended = ReplicaEvent(job_id, missing[0], ReplicaEventKind.EXITED, lost=True)
        final = await self.requeues.restart_if_allowed(ended, reason)
        if final is not None:
            await self.ctx.set_phase(job_id, Phase.FAILED, final, expected=phase)

    # ---- loops ------------------------------------------------------------------------------

    async def run_events(self) -> None:
        """Handle the backend's events: one job's in order, different jobs' concurrently, so
        the writes of replicas of jobs that start or end together are group-committed."""
        waiting: dict[str, list[ReplicaEvent]] = {}
        workers: set[asyncio.Task[None]] = set()
        try:
            async for event in self.backend.observe():
                queued = waiting.get(event.job_id)
                if queued is not None:
                    queued.append(event)  # its job's worker takes it next
                    continue
                waiting[event.job_id] = [event]
                worker = asyncio.get_running_loop().create_task(
                    self._job_events(event.job_id, waiting)
                )
                workers.add(worker)
                worker.add_done_callback(workers.discard)
        finally:
            for worker in workers:
                worker.cancel()

    async def _job_events(self, job_id: str, waiting: dict[str, list[ReplicaEvent]]) -> None:
        """Handle the events of `job_id` as they arrive, until none is waiting."""
        try:
            while events := waiting[job_id]:
                waiting[job_id] = []
                try:
                    await self.on_replica_events(events)
                except Exception:
                    log.exception("handling the events of %s failed", job_id)
        finally:
            waiting.pop(job_id, None)

    async def run_sweeps(self) -> None:
        wanted = self.ctx.bus.reconcile_wanted
        loop = asyncio.get_running_loop()
        last_timed = loop.time()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wanted.wait(), self.sweep_interval)
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
        view = await self.ctx.db(_sweep_view, store, list(self.active), self.ctx.clock())
        for withdrawn in view.withdrawn:
            self.ctx.bus.publish(withdrawn)
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
        for job in await self.ctx.db(store.expired_leases, now):
            assert job.lease is not None
            holder = f" from {job.lease.holder}" if job.lease.holder else ""
            reason = (
                f"client lease expired: no heartbeat{holder} for {job.lease.lease_seconds:.0f} s"
            )
            await self.ctx.set_phase(job.id, Phase.CANCELLED, reason, expected=job.phase)
        # Replicas may wait to start as long as the backend lets them (a pod pending for a
        # node): the backend fails such a job first, with its own reason, not this timeout.
        limit = self.ctx.settings.init_timeout_seconds + self.ctx.settings.replica_start_timeout
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
                reason = f"replicas not ready after {limit:.0f} s: {', '.join(waiting)}"
                await self.ctx.set_phase(job.id, Phase.FAILED, reason, expected=Phase.INITIALIZING)

    async def _launch(self, job: Job) -> None:
        job_id = job.id
        if not self.ctx.leadership.acting():  # paused past the lease: another leader launches
            log.warning("not launching %s: this coordinator no longer leads", job_id)
            return
        self.active.add(job_id)
        try:
            await self.backend.launch(job, job.replicas)
        except BackendUnavailable as exc:
            # Not the job's fault: keep it SCHEDULED, say why, retry on the next sweep; fail it
            # only when this lasts longer than the init timeout.
            waited = self.ctx.clock() - job.updated_at
            if waited <= self.ctx.settings.init_timeout_seconds:
                log.warning("launching %s: %s; retrying", job_id, exc)
                await self.ctx.db(
                    self.ctx.store.set_condition,
                    job_id,
                    Phase.SCHEDULED,
                    f"waiting for the backend to start replicas: {exc}",
                )
                return
            await self.ctx.set_phase(
                job_id,
                Phase.FAILED,
                f"could not start replicas for {waited:.0f} s: {exc}",
                expected=Phase.SCHEDULED,
            )
            return
        except Exception as exc:
            log.exception("launching %s failed", job_id)
            await self.ctx.set_phase(
                job_id, Phase.FAILED, f"could not start replicas: {exc}", expected=Phase.SCHEDULED
            )
            return
        change = await self.ctx.set_phase(
            job_id,
            Phase.INITIALIZING,
            f"started {len(job.replicas)} replicas",
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

    # ---- restarts ---------------------------------------------------------------------------

    def _stale(self, event: ReplicaEvent, state: StopState) -> bool:
        """An end that says nothing about the job's current attempt: a replica of an attempt
        being torn down to run again, of a requeued job, or of an earlier attempt."""
        if event.job_id in self.requeues.tasks or state.stopping or state.phase is Phase.QUEUED:
            return True
        return not state.is_current(event.attempt)

    async def _finished_while_stopping(self, event: ReplicaEvent, state: StopState) -> bool:
        """The chief of the current attempt ended all its steps as a requeue was asked for
        (its last report came before the request): the job is done, not to be run again."""
        if not (state.stopping and event.replica == CHIEF and event.exit_code == 0):
            return False
        if not state.is_current(event.attempt) or state.phase is not Phase.RUNNING:
            return False
        job = await self.ctx.db(self.ctx.store.get_job, event.job_id, with_replicas=False)
        if job.progress.step < job.spec.num_steps:
            return False  # it stopped as told
        change = await self.ctx.set_phase(
            event.job_id, Phase.SUCCEEDED, CHIEF_FINISHED, expected=Phase.RUNNING
        )
        return change.applied

    async def _died_before_its_checkpoint(self, event: ReplicaEvent, state: StopState) -> bool:
        """A replica of a gang asked for a checkpoint died: it cannot come, so the requeue
        goes ahead now instead of at the end of the grace period."""
        current = state.is_current(event.attempt)
        if not (state.checkpoint_wanted and current and event.exit_code != 0):
            return False
        code = "an unknown exit code" if event.exit_code is None else event.exit_code
        job = await self.ctx.db(self.ctx.store.get_job, event.job_id, with_replicas=False)
        where = resume_point(job.progress.checkpoint_step)
        why = f"{event.replica} exited ({code}) before the checkpoint; resumes from {where}"
        if await self.ctx.db(self.ctx.store.give_up_checkpoint, event.job_id, state.attempt, why):
            self.ctx.bus.wake_reconciler()
        return True

    async def _fail_or_restart(self, event: ReplicaEvent, reason: str) -> None:
        """The job's current attempt failed with `reason`: restart it if its policy allows,
        else fail it."""
        failed = await self.requeues.restart_if_allowed(event, reason)
        if failed is not None:
            await self.ctx.set_phase(event.job_id, Phase.FAILED, failed)

    # ---- replica events -----------------------------------------------------------------------

    async def on_replica_events(self, events: Sequence[ReplicaEvent]) -> None:
        """One job's events, in order. Starts are recorded together; so are exits while the
        job's current attempt runs with no requeue asked for, up to the first that may end the
        job (what follows it is decided after it). Anything else goes one event at a time."""
        at = 0
        while at < len(events):
            event = events[at]
            if event.kind is ReplicaEventKind.STARTED:
                run = _run_of(events, at, ReplicaEventKind.STARTED)
                await asyncio.gather(
                    *(self.replicas.started(e.job_id, e.replica, e.pid) for e in run)
                )
                at += len(run)
                continue
            if event.job_id in self.requeues.tasks:
                await self.on_replica_event(event)
                at += 1
                continue
            run = _run_of(events, at, ReplicaEventKind.EXITED)
            exits = [await self._exit_of(ended) for ended in run]
            written = await self.replicas.record_exits(event.job_id, exits)
            if not written.count or written.state is None:
                await self.on_replica_event(event)  # stale, stopping or unknown: as before
                at += 1
                continue
            last = run[written.count - 1]
            if exits[written.count - 1].decisive and written.change is None:
                await self._after_exit(last, written.state.phase)
            at += written.count

    async def _exit_of(self, event: ReplicaEvent) -> ReplicaExit:
        tail = await self.backend.log_tail(
            event.job_id, event.replica, self.ctx.settings.log_tail_lines
        )
        decisive = event.exit_code != 0 or event.replica == CHIEF
        return ReplicaExit(
            event.replica, event.attempt, event.exit_code, event.message, tail, decisive
        )

    async def on_replica_event(self, event: ReplicaEvent) -> None:
        store = self.ctx.store
        if event.kind is ReplicaEventKind.STARTED:
            # The replica may have registered (READY) before this event is handled.
            await self.replicas.started(event.job_id, event.replica, event.pid)
            return
        found = await self.ctx.db(store.stop_state, event.job_id)
        if found is not None and await self._finished_while_stopping(event, found):
            return
        if found is not None and await self._died_before_its_checkpoint(event, found):
            return
        if found is not None and self._stale(event, found):
            log.info("%s/%s of an ended attempt exited: ignored", event.job_id, event.replica)
            return
        phase = found.phase if found is not None else None
        code = event.exit_code
        tail = await self.backend.log_tail(
            event.job_id, event.replica, self.ctx.settings.log_tail_lines
        )
        await self.ctx.db(
            store.update_replica,
            event.job_id,
            event.replica,
            phase=exit_phase(phase, code),
            exit_code=code,
            message=event.message,
            log_tail=tail,
        )
        await self._after_exit(event, phase)

    async def _after_exit(self, event: ReplicaEvent, phase: Phase | None) -> None:
        """A replica's exit is recorded; the job was in `phase`: fail or restart it (a
        failure), finish it (the chief's success), or nothing (it had ended already)."""
        if phase is None or phase.terminal:
            return
        code = event.exit_code
        if code != 0:
            detail = f" ({event.message})" if event.message else ""
            if code is None and event.message:  # never ran, or lost: the message says why
                reason = f"replica {event.replica} failed: {event.message}"
            else:
                what = f"exit code {code}" if code is not None else "an unknown exit code"
                reason = f"replica {event.replica} exited with {what}{detail}"
            if code == EXIT_PEER_FAILED and not event.lost:
                self._consequences.hold(event, reason, self.ctx.clock())  # loops/settling.py
                return
            self._consequences.drop(event.job_id)
            await self._fail_or_restart(event, reason)
        elif event.replica == CHIEF:
            if phase is Phase.RUNNING:
                await self.ctx.set_phase(
                    event.job_id,
                    Phase.SUCCEEDED,
                    CHIEF_FINISHED,
                    expected=Phase.RUNNING,
                )
            else:
                await self.ctx.set_phase(
                    event.job_id, Phase.FAILED, f"chief exited while the job was {phase.value}"
                )


def _run_of(
    events: Sequence[ReplicaEvent], start: int, kind: ReplicaEventKind
) -> list[ReplicaEvent]:
    """The events of `kind` from `start` on, up to the first of another kind."""
    run = []
    for event in events[start:]:
        if event.kind is not kind:
            break
        run.append(event)
    return run


@dataclasses.dataclass(frozen=True)
class _SweepView:
    withdrawn: list[JobEvent]  # preemptions withdrawn as moot
    requests: list[RequeueRequest]
    phases: dict[str, Phase]  # of the jobs this coordinator runs
    scheduled: list[Job]  # every SCHEDULED job, full view


def _sweep_view(store: JobStore, active: list[str], now: float) -> _SweepView:
    """What a sweep reads, in one trip to the store's thread (each read as before)."""
    withdrawn = store.withdraw_moot_preemptions(now)
    requests = store.requeue_requests()
    phases = store.phases_of(active)
    scheduled = store.get_jobs(store.job_ids_in([Phase.SCHEDULED]))
    return _SweepView(withdrawn, requests, phases, scheduled)
