"""The reconciler's part for replica events: a replica's start and end, in order for each job,
turned into replica states and job phases.

One job's events are handled in order; different jobs' concurrently, so that the writes of
replicas of jobs that start or end together are group-committed (services/replicas.py). A
job's exits are written together up to the first that may end the job (a failure, or the
chief), which is acted on before anything after it; an end that says nothing about the job's
current attempt (one being requeued, an earlier attempt's) changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from appliance.backends.base import Backend, ReplicaEvent, ReplicaEventKind
from appliance.config import ReplicaSettings
from appliance.domain.phases import Phase
from appliance.domain.plan import CHIEF_REPLICA
from appliance.domain.reasons import Reason, ReasonCode, said
from appliance.domain.requeues import StopState
from appliance.domain.restarts import EXIT_PEER_FAILED
from appliance.loops.requeuing import Requeuer
from appliance.loops.settling import ConsequentFailures
from appliance.services.context import Context
from appliance.services.replicas import ReplicaService
from appliance.store.replica_batches import (
    CHIEF_FINISHED,
    ReplicaExit,
    exit_message,
    exit_phase,
)

log = logging.getLogger(__name__)


class ReplicaEventHandling:
    """Mixed into the Reconciler, which sets these up."""

    ctx: Context
    backend: Backend
    replicas: ReplicaService
    requeues: Requeuer
    lifetimes: ReplicaSettings
    _consequences: ConsequentFailures

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
        if not (state.stopping and event.replica == CHIEF_REPLICA and event.exit_code == 0):
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
        job = await self.ctx.db(self.ctx.store.get_job, event.job_id, with_replicas=False)
        note = (event.replica, event.exit_code, job.progress.checkpoint_step)
        why = said(ReasonCode.REPLICA_FAILED, replica=event.replica).but(
            died_before_checkpoint=note
        )
        if await self.ctx.db(self.ctx.store.give_up_checkpoint, event.job_id, state.attempt, why):
            self.ctx.bus.wake_reconciler()
        return True

    async def _fail_or_restart(self, event: ReplicaEvent, reason: Reason) -> None:
        """The job's current attempt failed with `reason`: restart it if its policy allows,
        else fail it."""
        self.ctx.metrics.replica_failed(event.replica)
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
                await self.replicas.started_all([(e.job_id, e.replica, e.pid) for e in run])
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
            event.job_id, event.replica, self.lifetimes.log_tail_lines
        )
        decisive = event.exit_code != 0 or event.replica == CHIEF_REPLICA
        return ReplicaExit(
            event.replica, event.attempt, event.exit_code, _message(event), tail, decisive
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
            event.job_id, event.replica, self.lifetimes.log_tail_lines
        )
        await self.ctx.db(
            store.update_replica,
            event.job_id,
            event.replica,
            phase=exit_phase(phase, code),
            exit_code=code,
            message=exit_message(phase, code, _message(event)),
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
            reason = said(
                ReasonCode.REPLICA_FAILED, replica=event.replica, exit_code=code,
                message=event.message, error=event.last_error,
            )  # fmt: skip
            if code == EXIT_PEER_FAILED and not event.lost:
                self._consequences.hold(event, reason, self.ctx.clock())  # loops/settling.py
                return
            self._consequences.drop(event.job_id)
            await self._fail_or_restart(event, reason)
        elif event.replica == CHIEF_REPLICA:
            if phase is Phase.RUNNING:
                await self.ctx.set_phase(
                    event.job_id,
                    Phase.SUCCEEDED,
                    CHIEF_FINISHED,
                    expected=Phase.RUNNING,
                )
            else:
                await self.ctx.set_phase(
                    event.job_id,
                    Phase.FAILED,
                    said(
                        ReasonCode.REPLICA_FAILED, replica=event.replica, while_phase=phase.value
                    ),
                )


def _message(event: ReplicaEvent) -> str:
    """A replica's message for its exit: what its backend says of it, and its last error."""
    return ": ".join(part for part in (event.message, event.last_error) if part)


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
