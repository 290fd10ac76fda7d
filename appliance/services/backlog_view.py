"""The queue as the scheduler and the doors see it: an in-memory index kept current, and the
last pass's decision, which says why each queued job waits.

The index (scheduler/backlog_index.py) is built from the store on first use (and again when
the scheduler starts, e.g. on taking office). After that it is never walked against the
store: every change of a job's queue entry (a phase change into or out of QUEUED, a new
priority) marks the job, and the next use re-reads the marked jobs only. A change is
marked by the one front door that announces it (Context) before anyone can read it, so a
position read after a write returns sees that write. A submit needs no read: it knows the
entry it wrote, and enters it (`expect` before the write, `enter` after), unless the job was
marked in between; so a stream of submits costs a reader of positions no store read.

Pending reasons are not written to the store on every pass: the scheduler publishes its
decision here and a door asks it for the reasons of the jobs it shows. Reasons are at most
one pass behind; the store's pending_reason of a queued job is what was said before the
scheduler first decided on it (e.g. "waiting for the scheduler", or why it was requeued).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Protocol

from appliance.domain.backlog import QueuedJob
from appliance.domain.holds import HELD
from appliance.domain.job import Job
from appliance.domain.phases import Phase
from appliance.domain.plan import ReplicaPlan
from appliance.domain.reasons import Reason, ReasonCode
from appliance.scheduler.backlog_index import BacklogIndex
from appliance.services.fair_reads import as_system


class Decided(Protocol):
    def why(self, job_id: str) -> Reason | None: ...


class BacklogReads(Protocol):
    def queued_jobs(self, known: Mapping[str, ReplicaPlan] | None = None) -> list[QueuedJob]: ...

    def queue_entries(
        self, job_ids: Iterable[str], known: Mapping[str, ReplicaPlan] | None = None
    ) -> tuple[list[QueuedJob], list[str]]: ...


class BacklogView:
    def __init__(self, store: BacklogReads, read: Callable[..., Awaitable[object]]) -> None:
        self._store = store
        self._read = read
        self._index: BacklogIndex | None = None
        self._marked: set[str] = set()
        self._lock = asyncio.Lock()
        self._decided: Decided | None = None
        self._said: Mapping[str, Reason] = {}
        self._building = False
        # Each refresh that changed the index is a generation; a job that entered the queue
        # after the generation the last pass decided on has no reason from it yet.
        self.generation = 0
        self._decided_generation = 0
        self._entered: dict[str, int] = {}
        # Submits between `expect` and `enter`: whether the job was marked in between.
        self._expected: dict[str, bool] = {}

    def __len__(self) -> int:
        """Jobs in the index as last brought up to date (0 before it is built)."""
        return len(self._index) if self._index is not None else 0

    def mark(self, job_id: str) -> None:
        """The job's queue entry may have changed (call before announcing the change)."""
        if job_id in self._expected:
            self._expected[job_id] = True
        if self._index is not None or self._building:
            self._marked.add(job_id)

    def expect(self, job_id: str) -> None:
        """A submit is about to write this new job QUEUED (call `enter` once it returns)."""
        self._expected[job_id] = False

    def enter(self, job_id: str, entry: QueuedJob | None) -> None:
        """The submit of `expect` returned: the job is queued as `entry` (None: the write
        failed, and may or may not have happened). The entry goes into the index as it is,
        without a read, unless the job changed since it was written (it was marked) or the
        index is being read; then the job is read again, as a marked one."""
        changed = self._expected.pop(job_id, True)
        if entry is None or changed or self._index is None or self._building:
            self.mark(job_id)
            return
        self.generation += 1  # as a refresh that found it: the next pass decides on it
        self._entered[job_id] = self.generation
        self._index.put(entry)

    def forget(self) -> None:
        """Build the index again from the store on next use."""
        self._index = None
        self._marked.clear()
        self._decided, self._said = None, {}
        self._entered.clear()

    async def current(self) -> BacklogIndex:
        """The index, with every change marked so far applied (its reads the coordinator's
        own: every caller waits on them, whoever came first)."""
        with as_system():
            return await self._current()

    async def _current(self) -> BacklogIndex:
        async with self._lock:
            if self._index is None:
                self._building = True  # what changes during the read is marked
                self._marked.clear()
                try:
                    jobs = await self._read(self._store.queued_jobs)
                finally:
                    self._building = False
                assert isinstance(jobs, list)
                self._index = BacklogIndex(jobs)
            if self._marked:
                index, marked = self._index, self._marked
                self._marked = set()
                known = {j: job.plan for j in marked if (job := index.get(j)) is not None}
                found = await self._read(self._store.queue_entries, marked, known)
                assert isinstance(found, tuple)
                entries, gone = found
                for job_id in gone:
                    index.remove(job_id)
                self.generation += 1
                for entry in entries:
                    if entry.job_id not in index:
                        self._entered[entry.job_id] = self.generation
                    index.put(entry)
            return self._index

    async def positions(self, job_ids: Iterable[str]) -> dict[str, int]:
        """1-based positions, each in its own queue, of those of the jobs that are queued."""
        index = await self.current()
        found = {job_id: index.position(job_id) for job_id in job_ids}
        return {job_id: position for job_id, position in found.items() if position}

    async def position(self, job_id: str) -> int:
        return (await self.current()).position(job_id)

    def entered_after(self, generation: int) -> set[str]:
        """The jobs that entered the index after `generation`: a pass that read the rest of
        what it decides on (dependencies, the pool) after that generation leaves them to the
        next pass, which will have read theirs."""
        return {job_id for job_id, entered in self._entered.items() if entered > generation}

    def publish(self, decided: Decided, said: Mapping[str, Reason], generation: int) -> None:
        """The scheduler's last decision, on the index of `generation`, and the reasons it
        gave beyond it (waiting for a dependency, for a preemption) which come first."""
        self._decided, self._said = decided, said
        self._decided_generation = generation
        self._entered = {j: g for j, g in self._entered.items() if g > generation}

    def reason(self, job_id: str) -> Reason | None:
        """Why a queued job waits, as of the last pass (None: not decided on yet)."""
        entry = self._index.get(job_id) if self._index is not None else None
        if entry is not None and entry.hold is not None:
            return entry.hold.reason  # held: whatever the last pass said
        if job_id in self._entered:
            return None  # it entered the queue after the last pass
        said = self._said.get(job_id)
        if said is not None:
            return None if said.code in HELD else said  # released since: not decided on yet
        return self._decided.why(job_id) if self._decided is not None else None

    async def waiting_for(self, codes: frozenset[ReasonCode]) -> tuple[set[str], set[str]]:
        """(matched, undecided): the queued jobs the last pass says wait for one of `codes`,
        and those it did not decide on (their stored reason is what every door shows). None
        of either before the first pass: then every queued job shows its stored reason."""
        index = await self.current()
        matched: set[str] = set()
        undecided: set[str] = set()
        for job_id in index.job_ids():
            why = self.reason(job_id)
            if why is None:
                undecided.add(job_id)
            elif why.code in codes:
                matched.add(job_id)
        return matched, undecided

    def shown(self, job: Job) -> Job:
        """The job with the queue position and pending reason every door shows: for a queued
        job, from the index and the last pass (the store's reason until a pass decided on
        it); for another, as stored."""
        if job.phase is not Phase.QUEUED or (self._index is None and job.hold is None):
            return job
        position = self._index.position(job.id) if self._index is not None else 0
        # Its hold as the job's own row says (written before this read), else the last pass.
        why = job.hold.reason if job.hold is not None else self.reason(job.id)
        reason = why.message if why is not None else job.pending_reason
        code = why.code_text if why is not None else job.pending_reason_code
        if (position, reason, code) == (
            job.queue_position,
            job.pending_reason,
            job.pending_reason_code,
        ):
            return job
        return dataclasses.replace(
            job, queue_position=position, pending_reason=reason, pending_reason_code=code
        )
