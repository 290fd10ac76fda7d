"""What every use case needs: the store (run off the event loop), the bus, a clock;
and the one front door for phase changes.

Every phase change goes through `set_phase`, `schedule` or `write_phases`: each writes through
the store's one checked writer (appliance.store.phase_writes) and then announces every change
it applied (the queue view, the bus's watchers, and the loops that care). No caller announces
by itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from sqlalchemy.exc import OperationalError

from appliance.domain.backlog import Placement
from appliance.domain.errors import NotFound, Unavailable
from appliance.domain.phase_moves import PhaseChange, PhaseMove
from appliance.domain.phases import HOLDS_RESOURCES, Phase
from appliance.domain.reasons import Reason, ReasonCode
from appliance.services.backlog_view import BacklogView
from appliance.services.bus import JobBus
from appliance.services.fair_reads import FairReads
from appliance.services.group_commit import GroupCommit
from appliance.services.leadership import Leadership
from appliance.services.metrics import Metrics
from appliance.services.start_estimates import StartEstimates
from appliance.store.jobs import JobStore

P = ParamSpec("P")
T = TypeVar("T")
R = TypeVar("R")


@dataclasses.dataclass
class Context:
    store: JobStore
    bus: JobBus
    executor: ThreadPoolExecutor
    clock: Callable[[], float] = time.time
    # Threads for reads only. SQLite has a single writer thread (`executor`); in WAL mode
    # readers on their own connections never wait for it, so a GET does not queue behind a
    # group commit or a scheduler pass. None: reads share `executor` (PostgreSQL's pool).
    reader: ThreadPoolExecutor | None = None
    # Whether this coordinator acts (the only one, or the leader within its renew deadline).
    leadership: Leadership = dataclasses.field(default_factory=Leadership)
    # What every door counts (services/metrics.py): bumped here for each phase change.
    metrics: Metrics = dataclasses.field(default_factory=Metrics)
    # The queue in memory, and why each queued job waits (services/backlog_view.py).
    backlog: BacklogView = dataclasses.field(init=False)
    # When each queued job is estimated to start (services/start_estimates.py).
    estimates: StartEstimates = dataclasses.field(init=False)

    # Reads, in turn by user when every reader thread is busy (services/fair_reads.py).
    _reads: FairReads = dataclasses.field(init=False, repr=False)
    # Phase changes asked for together, written together (one transaction per batch).
    _moves: GroupCommit[PhaseMove, PhaseChange] = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        readers = self.reader if self.reader is not None else self.executor
        # As many reads at once as it has threads (an inline executor, the simulator's: one).
        self._reads = FairReads(readers, getattr(readers, "_max_workers", 1))
        self.backlog = BacklogView(self.store, self.read)
        self.estimates = StartEstimates(self.store, self.read, self.backlog, self.clock)
        self._moves = GroupCommit[PhaseMove, PhaseChange](self._write_moves)

    async def db(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a blocking store call on the store's threads, never on the event loop.

        A database that cannot be reached (or is locked past its timeout) is Unavailable: the
        caller may retry, and the user sees that rather than an internal error.
        """
        return await self._run(self.executor, functools.partial(fn, *args, **kwargs))

    async def read(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Like `db`, for a call that only reads: it runs on the reader threads when there are.

        A read sees every write whose `db` call has returned (each read is its own snapshot),
        but is not ordered with writes still in flight.
        """
        call = functools.partial(fn, *args, **kwargs)
        try:
            return await self._reads.run(call)  # in turn by user when they must wait
        except OperationalError as exc:
            raise _unavailable(exc) from exc

    async def _run(self, executor: ThreadPoolExecutor, call: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(executor, call)
        except OperationalError as exc:
            raise _unavailable(exc) from exc

    async def set_phase(
        self, job_id: str, target: Phase, reason: Reason, expected: Phase | None = None
    ) -> PhaseChange:
        """JobStore.set_phase, then tell watchers and wake the loops that care.

        Phase changes asked for while others are being written are written together, each
        checked on its own as JobStore.set_phases does (a job that starts, finishes and is
        cancelled in the same few milliseconds as many others costs a share of a transaction).
        """
        change = await self._moves.write(PhaseMove(job_id, target, reason, expected))
        self._announce(change)
        return change

    async def _write_moves(self, moves: list[PhaseMove]) -> list[PhaseChange | NotFound]:
        return await self.db(self.store.set_phases, moves, self.clock())

    async def schedule(self, job_id: str, placements: Sequence[Placement]) -> PhaseChange:
        """JobStore.schedule (QUEUED -> SCHEDULED with the job's placements), then announced."""
        change = await self.db(self.store.schedule, job_id, placements, self.clock())
        self._announce(change)
        return change

    async def schedule_many(
        self, decisions: Sequence[tuple[str, Sequence[Placement]]]
    ) -> list[PhaseChange | NotFound]:
        """JobStore.schedule_many (a pass's decisions in one transaction), each announced."""
        changes = await self.db(self.store.schedule_many, decisions, self.clock())
        for change in changes:
            if isinstance(change, PhaseChange):
                self._announce(change)
        return changes

    async def write_phases(
        self, write: Callable[P, list[R]], *args: P.args, **kwargs: P.kwargs
    ) -> list[R]:
        """Run a store write that moves phases on the writer thread (`write` returns outcomes,
        PhaseChanges among them, e.g. a batch of cancels decided and written in one
        transaction, or outcomes that carry the change made with them as their `change`, e.g.
        a batch of replica exits that finished a job), then announce every change it
        applied."""
        outcomes = await self.db(write, *args, **kwargs)
        for outcome in outcomes:
            change = (
                outcome if isinstance(outcome, PhaseChange) else getattr(outcome, "change", None)
            )
            if isinstance(change, PhaseChange):
                self._announce(change)
        return outcomes

    async def request_requeue(
        self,
        job_id: str,
        attempt: int,
        reason: Reason,
        *,
        checkpoint_within: float = 0.0,
        preempted_by: str = "",
        retry: bool = False,
    ) -> bool:
        """JobStore.request_requeue (the reconciler then tears the attempt down and queues the
        job again), with `checkpoint_within` seconds for the chief's checkpoint first (0: none
        asked; `retry`: it counts against max_restarts); announced. False if that attempt is
        over or already stopping."""
        now = self.clock()
        checkpoint_by = now + checkpoint_within if checkpoint_within else 0.0
        written, event = await self.db(
            self.store.request_requeue, job_id, attempt, reason, now,
            checkpoint_by=checkpoint_by, preempted_by=preempted_by, retry=retry,
        )  # fmt: skip
        if event is not None:
            self.bus.publish(event)
        if written:
            timeout = isinstance(reason, Reason) and reason.code is ReasonCode.TIME_LIMIT
            if not timeout:  # a time limit's ends TIMEOUT, not queued
                self.metrics.requeue_asked(preemption=bool(preempted_by))
            self.bus.wake_reconciler()
        return written

    def _announce(self, change: PhaseChange) -> None:
        event = change.event
        if event is None:
            return
        if Phase.QUEUED in (event.from_phase, event.to_phase):
            self.backlog.mark(event.job_id)
        self.metrics.phase_changed(event)
        self.bus.publish(event)
        if event.from_phase in HOLDS_RESOURCES and event.to_phase not in HOLDS_RESOURCES:
            self.bus.wake_scheduler()  # resources came back (and a requeued job waits)
        # A queued job that ends frees nothing: the next periodic pass re-reads the queue (and
        # its pending reasons) instead of one pass per cancelled job. Nor has it replicas for
        # the reconciler to stop: it acts on jobs that enter the holding phases (to launch
        # them) or leave them (to tear them down), not on moves between them (INITIALIZING,
        # RUNNING), which were half of its wake-ups.
        leaves = event.from_phase in HOLDS_RESOURCES and event.to_phase not in HOLDS_RESOURCES
        if leaves or event.to_phase is Phase.SCHEDULED:
            self.bus.wake_reconciler()


def _unavailable(exc: OperationalError) -> Unavailable:
    first_line = str(exc.orig or exc).strip().splitlines()[0][:200]
    return Unavailable(f"the job store is unavailable ({first_line}); retry")
