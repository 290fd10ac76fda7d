"""The scheduler loop: snapshot the queues and the pool, decide with `admit`, apply.

A job waiting for other jobs (domain/dependencies.py) is left out of admission with why; one
whose dependency broke is cancelled here. A held job (domain/holds.py) is left out too, with
its hold as its reason, and keeps its place. A queue's head that cannot fit may preempt jobs of
its queue of lower priority, or, when it would run within its queue's quota, reclaim what
other queues borrow (scheduler/reclaim.py). Reservations are kept by scheduler/reservations.py
(a head waiting for one preempts nothing).

Passes are coalesced: wake-ups that arrive during a pass (a burst of submits) lead to one more
pass, after a gap as long as the pass took (at least MIN_PASS_GAP, at most MAX_PASS_GAP): the
scheduler takes at most about half of the coordinator's time however busy it is, and short
jobs ending one after another do not wait long for their successors. The queue is the
in-memory index (services/backlog_view.py), not a read of the store; a pass's decisions are
written in one transaction, and the reasons jobs wait are published to the view, not written
to every queued row.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

from appliance.config import PreemptionSettings, SchedulerSettings
from appliance.domain.backlog import QueuedJob, Release, RunningJob
from appliance.domain.dependencies import DependencyState, verdicts
from appliance.domain.fair_share import Usage, weighted_share
from appliance.domain.inventory import NodeKind, NodeUsage
from appliance.domain.phase_moves import PhaseChange
from appliance.domain.phases import Phase
from appliance.domain.queues import QueueSpec, Source, resolve_quotas
from appliance.domain.reasons import Reason, ReasonCode, said
from appliance.domain.reservations import Reservation
from appliance.loops.growing import Growing
from appliance.scheduler.admission import Admission, admit_backlog
from appliance.scheduler.array_caps import ArrayCaps
from appliance.scheduler.backlog_index import BacklogIndex
from appliance.scheduler.preemption import (
    PoolFree,
    Preemption,
    Room,
    anywhere,
    choose_victims,
    exempt_in_the_way,
)
from appliance.scheduler.quotas import QuotaBook
from appliance.scheduler.reclaim import borrowers, holding, queue_holdings, quota_room
from appliance.scheduler.reservations import ClassAdmissions, admit_around
from appliance.scheduler.user_caps import Holding, QueueUserCaps, UserCaps
from appliance.services.context import Context
from appliance.services.limits import Limits
from appliance.services.queues import pool_size
from appliance.store.jobs import JobStore

log = logging.getLogger(__name__)
RESERVATION = ReasonCode.RESERVATION
MIN_PASS_GAP = 0.005
MAX_PASS_GAP = 0.1
# Links of a dependency chain one pass cancels, when a link breaks.
MAX_CASCADE = 64
_NOTHING = admit_backlog(BacklogIndex(), [])  # the decision on an empty queue


class SchedulerLoop:
    def __init__(
        self,
        ctx: Context,
        scheduler: SchedulerSettings = SchedulerSettings(),
        preemption: PreemptionSettings = PreemptionSettings(),
        limits: Limits | None = None,
    ) -> None:
        """`limits`: the per-user limits, whose cap of running systems admission keeps."""
        self.ctx = ctx
        self.settings = scheduler
        self.preemption = preemption
        self.limits = limits
        self._capped = False
        self.growing = Growing(ctx, preemption)  # elastic jobs (scheduler/elastic.py)

    async def run(self) -> None:
        # E.g. taking office: the queue and the pool as the store has them now.
        self.ctx.backlog.forget()
        self.ctx.store.forget_pool()
        self.ctx.store.forget_reservations()
        self.ctx.metrics.forget_starts()
        wanted = self.ctx.bus.schedule_wanted
        loop = asyncio.get_running_loop()
        trace = _Trace(self.settings.trace)
        try:
            while True:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancel that
                # comes as the event is set, and the loop never stopped (a coordinator's stop
                # hung on a busy machine).
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.settings.interval):
                        await wanted.wait()
                wanted.clear()
                started = loop.time()
                try:
                    admitted = await self.run_once()
                except Exception:  # a failed pass is retried on the next wake-up
                    log.exception("scheduler pass failed")
                    admitted = 0
                took = loop.time() - started
                self.ctx.metrics.scheduler_pass.observe(took)
                trace.write(started, took, admitted, len(self.ctx.backlog))
                if self._capped:
                    wanted.set()  # it stopped at its limit: go on at once
                    await asyncio.sleep(0)
                else:
                    await asyncio.sleep(min(max(took, MIN_PASS_GAP), MAX_PASS_GAP))
        finally:
            trace.close()

    async def run_once(self) -> int:
        """One pass; returns how many jobs were admitted."""
        view = self.ctx.backlog
        index = await view.current()
        generation = view.generation
        if not len(index):
            view.publish(_NOTHING, {}, generation)
            await self.growing.maybe_grow()
            return 0
        # On the reader thread: a pass's reads need not wait behind the writes of replicas
        # and phases queued for the writer (everything it decides on was committed first).
        reads = await self.ctx.read(_pass_reads, self.ctx.store, self.ctx.clock())
        pending, cancelled = await self._dependencies(reads.dependencies)
        given = dict(pending)
        skip = set(pending) | cancelled
        for held in index.held():  # stepped over, keeping their places (domain/holds.py)
            assert held.hold is not None
            skip.add(held.job_id)
            given[held.job_id] = held.hold.reason
        decision = await self._admit(index, skip, given, generation, reads)
        self._capped = decision.capped
        view.publish(decision, given, generation)
        if not decision.admitted:
            if not decision.heads and not decision.capped:  # no job waits that could run
                await self.growing.maybe_grow()
            return 0
        submitted = [index.get(d.job_id) for d in decision.admitted]
        changes = await self.ctx.schedule_many(
            [(d.job_id, d.placements) for d in decision.admitted]
        )
        metrics = self.ctx.metrics
        admitted = 0
        for job, change in zip(submitted, changes, strict=True):
            if job is not None and isinstance(change, PhaseChange) and change.applied:
                metrics.admitted(job.job_id, job.created_at)
                admitted += 1
        metrics.admissions.inc(admitted)
        return admitted

    async def _admit(
        self,
        index: BacklogIndex,
        skip: set[str],
        given: dict[str, Reason],
        generation: int,
        reads: _PassReads,
    ) -> Admission | ClassAdmissions:
        """Decide on the jobs free to run, and ask for the preemptions and reclaims the heads
        need; `given` gets the reasons of the heads that wait for them. The index may have
        changed while this pass read the store (a door brought it up to date): a job that
        entered it after `generation` waits for the next pass, whose reads cover it."""
        store, settings, preemption = self.ctx.store, self.settings, self.preemption
        now = self.ctx.clock()
        usage, specs = reads.usage, reads.specs
        kinds = {u.node.name: u.node.kind for u in usage}
        if any(q.source is Source.KEPT for q in specs):
            await self.ctx.db(store.sweep_kept_queues)  # gone once their last job ended
        size = pool_size([u.node for u in usage])
        # strict=False: a pool that shrank under the quotas schedules on, as best it can.
        quotas = resolve_quotas(specs, *size, strict=False)
        # One queue (none defined) owns the pool: only the pool limits it, as ever.
        shared = len(quotas) > 1
        # What runs (every holding job and its placements: hundreds of rows on a big pool)
        # is read only when a pass decides on it: quotas, or preemption.
        min_run = preemption.min_run_seconds
        running: list[RunningJob] | None = None
        book: QuotaBook | None = None
        shares: dict[str, float] = {}
        if shared:
            half_life = settings.fair_share_half_life_seconds
            # The fold of ended attempts into the queues' usage is a write; what runs and the
            # usage are read after it on a reader thread (which sees it), not on the writer
            # that every registration, progress report and exit waits for.
            await self.ctx.db(store.fold_usage, now, half_life)
            held, used = await self.ctx.read(_quota_reads, store, now, half_life, min_run)
            book = QuotaBook(quotas, queue_holdings(held, kinds))
            running = held
            shares = {
                name: weighted_share(used.get(name, Usage()), *size, quota.weight)
                for name, quota in quotas.items()
            }
        limit = settings.max_admissions
        skip = skip | self.ctx.backlog.entered_after(generation)
        users = await self._user_caps(specs)
        arrays = ArrayCaps(reads.arrays) if reads.arrays else None
        decision = admit_around(
            index, usage, reads.reservations, now, book, shares, skip, limit, users, arrays,
            reads.releases,
        )  # fmt: skip
        # Only on a pass that admitted nothing: `usage` is then what the heads really face
        # (the next pass, at most MAX_PASS_GAP later, sees what this one admitted).
        if decision.admitted or preemption.policy == "never" or not decision.heads:
            return decision
        if running is None:
            running = await self.ctx.read(store.running_jobs, min_run)
        pool = PoolFree.of(usage)  # once for every head's search
        for head in decision.heads:
            job = head.job
            if (why := decision.why(job.job_id)) is not None and why.code is RESERVATION:
                continue  # it waits for a reservation's window: no preemption frees that
            room = quota_room(job, running, quotas, kinds) if shared else anywhere
            if head.within_quota and shared:
                candidates = borrowers(job, running, quotas, kinds, now)
                chosen = choose_victims(job, running, pool, now, candidates, room, fewest=False)
                if chosen is not None:
                    given[job.job_id] = await self._reclaim_for(job, chosen, running, kinds)
                    continue
            # A head always has its reason (a blocked job is said to wait when it is made one).
            waits = decision.why(job.job_id) or said(ReasonCode.CAPACITY, shortfall="")
            given[job.job_id] = await self._preempt_for(job, running, pool, waits, room)
        return decision

    async def _user_caps(self, specs: Sequence[QueueSpec]) -> UserCaps | None:
        """The per-user caps (the cluster's of running systems, the queues' of running jobs
        and systems), with what each user holds (read only when there is a cap: a pass
        without one costs nothing more)."""
        policy = self.limits.policy if self.limits is not None else None
        cluster = policy is not None and policy.caps_running_systems
        queue_caps = {
            q.name: QueueUserCaps(q.max_running_jobs_per_user, q.max_systems_per_user)
            for q in specs
            if q.max_running_jobs_per_user is not None or q.max_systems_per_user is not None
        }
        if not cluster and not queue_caps:
            return None
        held = await self.ctx.read(self.ctx.store.systems_held) if cluster else {}
        in_queues = (
            await self.ctx.read(self.ctx.store.held_in_queues, list(queue_caps))
            if queue_caps
            else {}
        )
        cap_of = (
            (lambda user, groups: policy.caps_of(user, groups).running_systems)
            if policy is not None and cluster
            else None
        )
        holdings = {key: Holding(*counts) for key, counts in in_queues.items()}
        return UserCaps(held, cap_of, queue_caps, holdings)

    async def _dependencies(
        self, states: list[DependencyState]
    ) -> tuple[dict[str, Reason], set[str]]:
        """The queued jobs still waiting for others, with why, and the jobs cancelled because
        a dependency can no longer be met (in one pass, the whole chain after a broken link);
        from `states` as the pass read them, read again after each cancelling link."""
        cancelled: set[str] = set()
        for link in range(MAX_CASCADE):
            if link:
                states = await self.ctx.db(self.ctx.store.dependency_states)
            waiting, broken = verdicts(states)
            if not broken:
                break
            for job_id, reason in broken.items():
                await self.ctx.set_phase(job_id, Phase.CANCELLED, reason, expected=Phase.QUEUED)
                self.ctx.metrics.dependency_cancels.inc()
                cancelled.add(job_id)
        return waiting, cancelled

    async def _reclaim_for(
        self,
        head: QueuedJob,
        chosen: Preemption,
        running: list[RunningJob],
        kinds: Mapping[str, NodeKind],
    ) -> Reason:
        """Reclaim for `head`: ask the chosen borrowers to stop; returns its pending reason."""
        reason = said(
            ReasonCode.RECLAIMED, by=head.job_id, priority=head.priority.name, queue=head.queue
        )
        await self._request(head, chosen.victims, reason, running)
        stopping = (*chosen.waiting_for, *chosen.victims)
        return said(
            ReasonCode.RECLAIM, systems=sum(holding(v, kinds).systems for v in stopping),
            queues=sorted({v.queue for v in stopping}),
            jobs=", ".join(v.job_id for v in stopping),
        )  # fmt: skip

    async def _request(
        self,
        head: QueuedJob,
        victims: Sequence[RunningJob],
        reason: Reason,
        running: list[RunningJob],
    ) -> None:
        """Ask each victim to stop (checkpoint first when it can), and count it as stopping
        for the heads decided after this one."""
        grace = self.preemption.grace_seconds
        for victim in victims:
            await self.ctx.request_requeue(
                victim.job_id, victim.attempt, reason,
                checkpoint_within=grace if victim.checkpointable else 0.0,
                preempted_by=head.job_id,
            )  # fmt: skip
            index = running.index(victim)
            running[index] = dataclasses.replace(victim, stopping=True, preempted_by=head.job_id)
        self.ctx.metrics.preemptions.inc(len(victims))

    async def _preempt_for(
        self,
        head: QueuedJob,
        running: list[RunningJob],
        pool: PoolFree,
        waits: Reason,
        room: Room,
    ) -> Reason:
        """Ask the victims that make room for `head` to stop (checkpoint first when they can);
        returns the head's pending reason: whom it waits for, else `waits` (with the jobs
        that would make room but may not be preempted, when there are)."""
        now = self.ctx.clock()
        chosen = choose_victims(head, running, pool, now, room=room)
        if chosen is None:
            exempt = exempt_in_the_way(head, running, pool, now, room)
            return waits.but(exempt=exempt) if exempt else waits
        reason = said(ReasonCode.PREEMPTED, by=head.job_id, priority=head.priority.name)
        await self._request(head, chosen.victims, reason, running)
        stopping = (*chosen.waiting_for, *chosen.victims)
        return said(
            ReasonCode.PREEMPTING,
            victims=tuple((v.job_id, v.priority.name) for v in stopping),
            checkpoint=any(v.checkpointable for v in stopping),
        )


class _Trace:
    """One JSON line per pass to APPLIANCE_SCHEDULER_TRACE, when it is set. A diagnostic: a
    trace that cannot be written is given up (said once in the log), never the scheduling."""

    def __init__(self, path: Path | None) -> None:
        self._file: TextIO | None = None
        if path is not None:
            try:
                self._file = path.open("a", buffering=1 << 16)
            except OSError as exc:
                log.error("scheduler trace %s: %s; passes go on untraced", path, exc.strerror)
        self._epoch = time.time() - asyncio.get_running_loop().time()

    def write(self, started: float, seconds: float, admitted: int, queued: int) -> None:
        if self._file is not None:
            at = round(self._epoch + started, 6)
            line = {"at": at, "seconds": round(seconds, 6), "admitted": admitted, "queued": queued}
            try:
                self._file.write(json.dumps(line) + "\n")
            except OSError as exc:
                log.error("scheduler trace: %s; passes go on untraced", exc.strerror)
                self._file = None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


@dataclasses.dataclass(frozen=True)
class _PassReads:
    dependencies: list[DependencyState]
    usage: list[NodeUsage]
    specs: list[QueueSpec]
    # Arrays capping their tasks running at once, with a task queued: (cap, tasks holding).
    arrays: dict[str, tuple[int, int]]
    releases: list[Release]  # when the jobs holding systems give them back (time limits)
    reservations: list[Reservation]  # (cached in the store: no read while none changes)


def _quota_reads(
    store: JobStore, now: float, half_life: float, min_run: float
) -> tuple[list[RunningJob], dict[str, Usage]]:
    """What a pass over queues reads besides `_pass_reads`, once the ended attempts are folded
    into their queues' usage: what runs, as preemption and the quota book see it, and each
    queue's decayed usage (domain/fair_share.py)."""
    return store.running_jobs(min_run), store.queue_usage(now, half_life)


def _pass_reads(store: JobStore, now: float) -> _PassReads:
    """What every pass reads besides the queue, in one trip to the store's thread."""
    return _PassReads(
        store.dependency_states(),
        store.pool_usage(),
        store.queue_specs(),
        store.array_caps(),
        store.releases(now),
        store.reservations(),
    )
