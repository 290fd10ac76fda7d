"""Worker control use cases: what a job's replicas ask of the coordinator.

Every call names the attempt its replica was started for. A replica of an attempt that is over
(one left from before a requeue) is refused: it cannot register, read the topology or write
progress into the attempt that runs now, and its heartbeats tell it to stop.

A heartbeat also says what the replica's data plane is (shared memory or gRPC, per peer): the
line is bounded and escaped, and written only when it changed (the last line written of each
replica is remembered, so an unchanged heartbeat costs no write).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Sequence
from typing import TypeVar

from appliance.domain.data_plane import data_plane_line
from appliance.domain.errors import (
    Conflict,
    DeadlineExceeded,
    job_not_found,
    stale_attempt,
)
from appliance.domain.job import EventKind, Job, JobEvent, Progress
from appliance.domain.phases import Phase
from appliance.domain.requeues import StopState
from appliance.services.context import Context
from appliance.services.group_commit import GroupCommit
from appliance.store.replica_batches import (
    ExitsWritten,
    Registered,
    Registration,
    ReplicaExit,
    all_ready,
)
from appliance.store.replicas import DataPlane

log = logging.getLogger(__name__)
T = TypeVar("T")
A = TypeVar("A")
# How long a heartbeat's answer may wait for its data-plane line to be written.
DATA_PLANE_WRITE_SECONDS = 1.0

Started = tuple[str, str, int | None]  # job, replica, pid
JobExits = tuple[str, Sequence[ReplicaExit]]
Report = tuple[str, int, Progress]  # job, attempt, progress
Reported = tuple[bool, StopState | None]  # written, the job's state before

# Names longer than the store's columns (String(64)) are of no replica: nothing to remember.
MAX_NAME = 64
# The data-plane lines remembered (the oldest forgotten first: it is written again, unchanged).
MAX_DATA_PLANES_KEPT = 10_000


class ReplicaService:
    """What replicas ask of the coordinator, and what the reconciler records of them.

    The writes of many replicas (and many jobs) that arrive together are group-committed:
    a short job's replicas start, register and exit within milliseconds of each other, and a
    transaction each was most of what such a job cost (store/replica_batches.py).
    """

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        # A request is a gang (a job's replicas that ask together) or a single replica: one
        # future and one place in the batch per job, not per replica.
        self._registrations = GroupCommit[Sequence[Registration], list[Registered | Exception]](
            self._register_batch
        )
        self._starts = GroupCommit[Sequence[Started], None](self._start_batch)
        self._exits = GroupCommit[JobExits, ExitsWritten](self._exit_batch)
        self._progress = GroupCommit[Report, Reported](self._progress_batch)
        # The replicas of jobs that run together wait, and ask what to do, together: their
        # reads of the jobs' states are one trip too (one at a time, they drew the jobs apart
        # in time, and then nothing after them was written together).
        self._states = GroupCommit[str, StopState | None](self._read_states)
        self._readiness = GroupCommit[str, tuple[int, int]](self._read_readiness)
        self._data_planes = GroupCommit[DataPlane, bool](self._data_plane_batch)
        self._data_plane_said: dict[tuple[str, str], tuple[int, str]] = {}  # as last written

    async def register(
        self, job_id: str, attempt: int, replica: str, address: str, pid: int
    ) -> None:
        """A replica serves at `address`; the job runs when all of its replicas have said so."""
        await self.register_gang(job_id, attempt, [(replica, address, pid)])

    async def register_gang(
        self, job_id: str, attempt: int, replicas: Sequence[tuple[str, str, int]]
    ) -> bool:
        """Replicas of `attempt` (name, address, pid) that register together, in one request of
        the group commit, each decided as if alone (store/replica_batches.py); raises the first
        refusal. True when their write moved the job to RUNNING (it completed the gang of a job
        INITIALIZING); else the job runs once its launch or the last replica moves it.

        A complete gang of a job still SCHEDULED: its launch moves it on when it is
        INITIALIZING (start_if_all_ready); of one INITIALIZING: moved in the same write."""
        gang = [Registration(job_id, attempt, name, addr, pid) for name, addr, pid in replicas]
        running = False
        for asked, answer in zip(gang, await self._registrations.write(gang), strict=True):
            if isinstance(answer, Exception):
                raise answer
            if answer.taken is not None:
                raise Conflict(
                    f"{asked.replica} of {job_id} is already registered at {answer.taken}; "
                    "a replica registers once"
                )
            running = running or answer.change is not None
        return running

    async def started(self, job_id: str, replica: str, pid: int | None) -> None:
        """The backend started `replica` (PENDING -> STARTED; its pid recorded)."""
        await self.started_all([(job_id, replica, pid)])

    async def started_all(self, started: Sequence[Started]) -> None:
        """Replicas the backend started together (a job's gang): one request of the group
        commit, written with the others' as `started` is."""
        await self._starts.write(started)

    async def record_exits(self, job_id: str, exits: Sequence[ReplicaExit]) -> ExitsWritten:
        """Record a job's replica exits, in order, as far as JobStore.record_exits may."""
        return await self._exits.write((job_id, exits))

    async def _register_batch(
        self, batch: list[Sequence[Registration]]
    ) -> list[list[Registered | Exception]]:
        answers = await self.ctx.write_phases(
            self.ctx.store.register_replicas, _flat(batch), self.ctx.clock()
        )
        return _unflat(batch, answers)

    async def _start_batch(self, batch: list[Sequence[Started]]) -> list[None]:
        await self.ctx.db(self.ctx.store.mark_started, _flat(batch))
        return [None] * len(batch)

    async def _read_states(self, job_ids: list[str]) -> list[StopState | None]:
        states = await self.ctx.read(self.ctx.store.stop_states, job_ids)
        return [states.get(job_id) for job_id in job_ids]

    async def _read_readiness(self, job_ids: list[str]) -> list[tuple[int, int]]:
        counts = await self.ctx.read(self.ctx.store.replicas_ready, job_ids)
        return [counts.get(job_id, (0, 0)) for job_id in job_ids]

    async def _progress_batch(self, batch: list[Report]) -> list[Reported]:
        return await self.ctx.db(self.ctx.store.record_progress, batch)

    async def _data_plane_batch(self, batch: list[DataPlane]) -> list[bool]:
        return await self.ctx.db(self.ctx.store.set_data_planes, batch)

    async def _exit_batch(self, batch: list[JobExits]) -> list[ExitsWritten]:
        return await self.ctx.write_phases(self.ctx.store.record_exits, batch, self.ctx.clock())

    async def _run(self, job_id: str, replicas: int) -> None:
        await self.ctx.set_phase(
            job_id, Phase.RUNNING, all_ready(replicas), expected=Phase.INITIALIZING
        )

    async def start_if_all_ready(self, job_id: str) -> None:
        ready, replicas = await self._readiness.write(job_id)
        if replicas and ready == replicas:
            await self._run(job_id, replicas)

    async def await_running(self, job_id: str, attempt: int, wait_seconds: float) -> Job:
        """Block until `attempt` of the job is RUNNING (every replica registered); then its
        full status. Raises as `wait_running` does."""
        while True:
            await self.wait_running(job_id, attempt, wait_seconds)
            job = await self.ctx.db(self.ctx.store.get_job, job_id)
            if job.attempt == attempt and job.phase is Phase.RUNNING:
                return job
            # It moved on between the two reads: wait_running says how.

    async def wait_running(self, job_id: str, attempt: int, wait_seconds: float) -> None:
        """Return once `attempt` of the job is RUNNING (every replica registered).

        Conflict once the job is over (or on another attempt): the caller stops. A job still
        starting after `wait_seconds` is DeadlineExceeded, "not yet": replicas may take as long
        as the backend lets them (a pod pending up to its pending timeout), and the job's own
        timeouts end the wait, so the caller asks again.
        """
        deadline = asyncio.get_running_loop().time() + wait_seconds
        with self.ctx.bus.subscribe(job_id) as changes:
            while True:
                state = await self._states.write(job_id)
                if state is None:
                    raise job_not_found(job_id)
                if state.attempt != attempt:
                    raise stale_attempt(job_id, attempt, state.attempt)
                if state.phase is Phase.RUNNING:
                    return
                if state.phase.terminal:
                    job = await self.ctx.read(self.ctx.store.get_job, job_id, with_replicas=False)
                    raise Conflict(f"job {job_id} is {job.phase.value}: {job.reason}")
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    raise DeadlineExceeded(
                        f"job {job_id} not running after {wait_seconds:.0f} s "
                        f"({state.phase.value}); ask again"
                    )
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await changes.get()

    async def report_progress(
        self, job_id: str, attempt: int, progress: Progress, checkpointed: bool = False
    ) -> Directive:
        """Record the progress of the chief of `attempt` and tell watchers (`checkpointed`: it
        wrote the checkpoint asked of it, at progress.step); returns what it should do next."""
        # Written even when told to stop (JobStore.set_progress says when); the directive is
        # from the job's state as it was before, read in the same transaction.
        written, state = await self._progress.write((job_id, attempt, progress))
        directive = directive_from(job_id, attempt, state)
        if written:
            self.ctx.bus.publish(
                JobEvent(job_id, EventKind.PROGRESS, self.ctx.clock(), progress=progress)
            )
        if checkpointed:
            recorded, withdrawn = await self.ctx.db(
                self.ctx.store.record_checkpoint_now, job_id, attempt, progress.step,
                self.ctx.clock(),
            )  # fmt: skip
            if withdrawn is not None:
                self.ctx.bus.publish(withdrawn)
            if recorded:
                self.ctx.bus.wake_reconciler()  # the requeue (or the preemptor) can go on
                directive = await self.directive(job_id, attempt)
        return directive

    async def directive(self, job_id: str, attempt: int) -> Directive:
        """What a replica of `attempt` should do: go on, checkpoint now (the chief of a job
        being preempted), or stop (the job ended, or this attempt is over)."""
        return directive_from(job_id, attempt, await self._states.write(job_id))

    async def heartbeat(
        self, job_id: str, attempt: int, replica: str, data_plane: str = ""
    ) -> Directive:
        """A replica of `attempt` is alive and says what its data plane is (untrusted: bounded
        and escaped, recorded when it changed, while the attempt runs); what it should do."""
        directive = await self.directive(job_id, attempt)
        if directive.keep_running:
            # A heartbeat's answer never waits long on this write, nor fails with it: a
            # coordinator that cannot write now (a standby, a store in failover) still
            # answers; an unrecorded line is tried again with the next heartbeat.
            line = data_plane_line(data_plane)
            recording = asyncio.ensure_future(
                self._record_data_plane(job_id, attempt, replica, line)
            )
            await asyncio.wait({recording}, timeout=DATA_PLANE_WRITE_SECONDS)
            if not recording.done():
                recording.cancel()
            elif not recording.cancelled() and recording.exception() is not None:
                log.warning("could not record %s's data plane: %s", replica, recording.exception())
        return directive

    async def _record_data_plane(self, job_id: str, attempt: int, replica: str, line: str) -> None:
        if len(job_id) > MAX_NAME or len(replica) > MAX_NAME:
            return  # no such replica
        key = (job_id, replica)
        said = self._data_plane_said.get(key)
        if said == (attempt, line) or (said is None and not line):
            return  # as written; or not chosen yet, as a replica's row starts
        await self._data_planes.write((job_id, attempt, replica, line))
        self._data_plane_said.pop(key, None)
        self._data_plane_said[key] = (attempt, line)
        if len(self._data_plane_said) > MAX_DATA_PLANES_KEPT:
            del self._data_plane_said[next(iter(self._data_plane_said))]


def _flat(requests: Sequence[Sequence[T]]) -> list[T]:
    return [item for request in requests for item in request]


def _unflat(requests: Sequence[Sequence[object]], answers: Sequence[A]) -> list[list[A]]:
    """`answers` (one per item of the flattened `requests`) cut back into one list each."""
    cut, at = [], 0
    for request in requests:
        cut.append(list(answers[at : at + len(request)]))
        at += len(request)
    return cut


def directive_from(job_id: str, attempt: int, state: StopState | None) -> Directive:
    """What a replica of `attempt` should do, given its job's state (None: no such job)."""
    if state is None:
        raise job_not_found(job_id)
    current = state.attempt == attempt and not state.phase.terminal
    if not current or (state.stopping and not state.checkpoint_wanted):
        return Directive(False, state.phase)
    return Directive(True, state.phase, checkpoint_now=state.checkpoint_wanted)


@dataclasses.dataclass(frozen=True)
class Directive:
    """The coordinator's answer to a replica's heartbeat or progress report."""

    keep_running: bool
    phase: Phase
    checkpoint_now: bool = False
