"""Gang admission: a pure function from a queue snapshot and the pool to decisions.

Within a queue, order is priority, then submit time. A job gets every placement its plan
needs or nothing. The first job of a queue that does not fit (its head) holds what is free
of what it needs, and for each replica it cannot place on a shared node it holds back a whole
node that could host it once that node drains; it also sets its quota aside. Jobs behind it
in its queue may start only on what is left and within their queue's quota: backfill never
delays the head. With the running jobs' time limits (scheduler/backfill.py, EASY backfill as
Slurm's), a head short only of systems has a shadow time, and a job behind it may also start
on the systems it holds when it ends by then or takes only what the head will not need then.

Across queues (scheduler/quotas.py): first every queue, lowest fair share first, starts what
fits within its quota; then, in the same order, queues borrow idle capacity beyond their
quota while the cohort can lend it. A queue whose next job may not borrow stops there. With
no queues defined there is one, `default`, owning the pool: the rules above reduce to one
priority queue. A job whose user's running jobs hold their cap of systems is stepped over
(scheduler/user_caps.py): it is never a head, and holds nothing back; so is an array's task
while its array runs its cap of tasks (scheduler/array_caps.py).

What a pass costs grows with what it admits, not with the queue. Behind a head, whether a
job can start depends only on its plan's shape (and the pass's state), so the pass asks
which shapes of the queue would fit now and jumps to the first job of one of them
(scheduler/backlog_index.py) instead of walking every job in between. The jobs it steps over
wait, each for a reason that follows from its shape and the state the pass had then: the
pass keeps that state (a few counts per stretch) and says the reason when it is asked
(`Admission.reason`), instead of writing one for every queued job.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Collection, Mapping, Sequence

from appliance.domain.backlog import Placement, QueuedJob, Release
from appliance.domain.inventory import NodeUsage
from appliance.domain.plan import PlanShape, Role
from appliance.domain.queues import DEFAULT_QUEUE, Quota
from appliance.domain.reasons import Reason, ReasonCode, said
from appliance.scheduler.array_caps import ArrayCaps
from appliance.scheduler.backfill import short_only_of_systems, taken
from appliance.scheduler.backlog_index import BacklogIndex, Order
from appliance.scheduler.limits_backfill import LimitsBackfill
from appliance.scheduler.placement import KIND_OF_ROLE, Counts, FreeCapacity
from appliance.scheduler.quotas import NOTHING, Need, QuotaBook, never_fits
from appliance.scheduler.user_caps import UserCaps

_UNLIMITED = Quota(1 << 62, 1 << 62)
_FIRST: Order = (-(1 << 62), -math.inf, "")


@dataclasses.dataclass(frozen=True)
class Decision:
    job_id: str
    placements: tuple[Placement, ...]


@dataclasses.dataclass(frozen=True)
class Head:
    """A queue's first job that did not fit. `within_quota`: it would run within its queue's
    quota, so what other queues borrow may be reclaimed for it."""

    job: QueuedJob
    within_quota: bool


@dataclasses.dataclass
class _Stretch:
    """Jobs of a queue after `start` and before `end` (None: to the end) that the pass stepped
    over behind the queue's head, with the state it had then. `borrowing`: stepped over while
    the queue borrowed (its jobs there wait behind the head, whatever they need)."""

    start: Order
    end: Order | None
    head: Head
    borrowing: bool
    counts: Counts
    used: dict[str, Need]
    said: dict[PlanShape, Reason] = dataclasses.field(default_factory=dict)


class Admission:
    """What one pass decided: the jobs admitted, each queue's head, and why every other job of
    the queue it decided on waits (asked job by job: `reason`; all at once: `pending`)."""

    def __init__(self, state: _Pass) -> None:
        self.admitted: list[Decision] = state.admitted
        # Each queue's head, in the order the queues were served.
        self.heads: tuple[Head, ...] = tuple(state.heads_in_order)
        # It stopped at its limit of admissions: the next pass goes on from there.
        self.capped = state.capped
        self._state = state

    @property
    def head(self) -> QueuedJob | None:
        """The first head (with one queue: the one a preemption may make room for)."""
        return self.heads[0].job if self.heads else None

    def why(self, job_id: str) -> Reason | None:
        """Why a job left in the queue waits (None: admitted, not queued then, or not reached
        by a pass that stopped at its limit)."""
        return self._state.reason(job_id)

    def reason(self, job_id: str) -> str | None:
        """The message of `why`."""
        why = self._state.reason(job_id)
        return why.message if why is not None else None

    @property
    def pending_reasons(self) -> dict[str, Reason]:
        """Every job left in the queue, with why it waits (as many reasons as jobs: for
        small queues and tests; the scheduler asks `why` for the jobs someone reads)."""
        state = self._state
        return {
            job.job_id: reason
            for name in state.index.queues()
            for job in state.index.in_order(name)
            if job.job_id not in state.skip and (reason := state.reason(job.job_id)) is not None
        }

    @property
    def pending(self) -> dict[str, str]:
        """`pending_reasons`' messages."""
        return {job_id: why.message for job_id, why in self.pending_reasons.items()}


def admit(
    queue: Sequence[QueuedJob],
    pool: Sequence[NodeUsage],
    book: QuotaBook | None = None,
    shares: Mapping[str, float] | None = None,
) -> Admission:
    """Decide on `queue` (any order) over `pool`. `book`: the queues' quotas and holdings
    (None: one default queue owning the pool); `shares`: each queue's weighted fair share."""
    return admit_backlog(BacklogIndex(queue), pool, book, shares)


def admit_backlog(
    index: BacklogIndex,
    pool: Sequence[NodeUsage],
    book: QuotaBook | None = None,
    shares: Mapping[str, float] | None = None,
    skip: Collection[str] = frozenset(),
    limit: int | None = None,
    users: UserCaps | None = None,
    arrays: ArrayCaps | None = None,
    releases: Sequence[Release] | None = None,
    now: float = 0.0,
    first: Collection[str] = frozenset(),
) -> Admission:
    """`admit` on the queue as the index holds it, leaving out the jobs in `skip` (those
    waiting for other jobs); stopping once it admitted `limit` jobs (None: no limit), like
    Slurm's main scheduler stops at its queue depth, so that no pass runs long. `users`: the
    per-user caps of running systems (None: no user has one); `arrays`: the caps of arrays'
    tasks running at once (None: no array has one). `releases`: when the running jobs give
    their systems back by their time limits, at `now` (None: no backfill by time limits).
    `first`: systems placed on before the others (scheduler/reservations.py)."""
    if book is None:
        book = QuotaBook({DEFAULT_QUEUE: _UNLIMITED}, {})
    names = _with_jobs(index, skip)
    for name in names:
        book.quotas.setdefault(name, Quota(0, 0))  # a queue since deleted: borrows only
        book.used.setdefault(name, NOTHING)
    shares = shares or {}
    # A queue without a share (one deleted while a job was submitted to it) goes last.
    order = sorted(names, key=lambda name: (shares.get(name, math.inf), name))
    state = _Pass(index, pool, book, skip, limit, users, arrays, first)
    if releases is not None:
        state.releases, state.now = list(releases), now
    waiting: dict[str, Order] = {}  # queue -> order of the job before its first to borrow
    for name in order:
        if not state.capped:
            state.within_quota(name, waiting)
    for name in order:
        if name in waiting and not state.capped:
            state.borrowing(name, waiting[name])
    return Admission(state)


def _with_jobs(index: BacklogIndex, skip: Collection[str]) -> list[str]:
    """The queues with a job to decide on (a queue whose jobs all wait for others has none)."""
    skipped: dict[str, int] = {}
    for job_id in skip:
        job = index.get(job_id)
        if job is not None:
            skipped[job.queue] = skipped.get(job.queue, 0) + 1
    return [name for name in index.queues() if index.count(name) > skipped.get(name, 0)]


class _Pass(LimitsBackfill):
    """The free capacity, quota book and outcomes of one admission pass."""

    def __init__(
        self,
        index: BacklogIndex,
        pool: Sequence[NodeUsage],
        book: QuotaBook,
        skip: Collection[str],
        limit: int | None = None,
        users: UserCaps | None = None,
        arrays: ArrayCaps | None = None,
        first: Collection[str] = frozenset(),
    ) -> None:
        self.index, self.book, self.skip, self.limit = index, book, skip, limit
        self.users = users
        self.arrays = arrays
        demands = {
            (kind, demand)
            for name in index.queues()
            for shape in index.shapes(name)
            for role, _, demand in shape
            if (kind := KIND_OF_ROLE.get(Role(role))) is not None
        }
        self.capacity = FreeCapacity(pool, demands, first)
        self.admitted: list[Decision] = []
        self.said: dict[str, Reason] = {}  # reasons of the jobs the pass looked at one by one
        self.stretches: dict[str, list[_Stretch]] = {}
        self.heads: dict[str, Head] = {}
        self.heads_in_order: list[Head] = []
        self._needs: dict[PlanShape, Need] = {}
        self._admitted: set[str] = set()
        self._starts: dict[str, list[Order]] = {}  # of each queue's stretches, once decided
        # Backfill by time limits: the running jobs' ends (and those this pass starts), now.
        self.releases: list[Release] | None = None
        self.now = 0.0
        self._only_systems = False  # the blocked head decided on lacks only systems

    # ---- the walk --------------------------------------------------------------------------

    def within_quota(self, name: str, waiting: dict[str, Order]) -> None:
        """The queue's jobs in order while they run within its quota, until its head; then
        only those that fit behind it. A job that would have to borrow ends this part."""
        before = _FIRST
        for job in self.index.in_order(name):
            if job.job_id in self.skip:
                continue
            need = self.need(job.plan.shape)
            if not self.never(job, need) and not self.over_user_cap(job, need):
                if not self.book.within(name, need):
                    waiting[name] = before
                    return
                placements, complete = self.capacity.place(job.plan)
                if complete:
                    self._admit(job, *self._grown(job, need, placements, borrow=False))
                    if self.capped:
                        return
                else:
                    reason = said(
                        ReasonCode.CAPACITY, shortfall=self.capacity.shortfall(job.plan.shape)
                    )
                    free = dict(self.capacity.free) if self.releases is not None else None
                    self._block(job, need, placements, reason, within_quota=True)
                    held = taken(free, self.capacity.free) if free is not None else {}
                    self._only_systems = short_only_of_systems(job, placements)
                    self._backfill(name, job.order)
                    if free is not None and held and not self.capped:
                        self._backfill_by_limits(name, job, free, held)
                    return
            before = job.order

    def _backfill(self, name: str, after: Order) -> None:
        """Behind the queue's head: admit, in order, each job whose shape fits now."""
        head = self.heads[name]
        while True:
            admissible = [s for s in self.index.shapes(name) if self._fits_behind(name, s)]
            found = [self._next_of_shape(name, shape, after) for shape in admissible]
            following = min((order for order in found if order is not None), default=None)
            self._stretch(name, after, following, head, borrowing=False)
            if following is None:
                return
            job = self.index.at(name, following)
            if self.over_user_cap(job, self.need(job.plan.shape)):
                after = following  # stepped over: its user holds their cap
                continue
            placements, _ = self.capacity.place(job.plan)
            need = self.need(job.plan.shape)
            self._admit(job, *self._grown(job, need, placements, borrow=False))
            if self.capped:
                return
            after = following

    def borrowing(self, name: str, after: Order) -> None:
        """The queue's jobs from its first that must borrow: each runs on what the cohort
        lends, or is the queue's head and the queue stops there."""
        for job in self.index.in_order(name, None if after == _FIRST else after):
            if job.job_id in self.skip:
                continue
            need = self.need(job.plan.shape)
            if self.never(job, need) or self.over_user_cap(job, need):
                continue
            within = self.book.within(name, need)
            why = "" if within else self.book.why_not_borrow(name, need)
            placements, complete = self.capacity.place(job.plan) if not why else ([], False)
            if complete:
                self._admit(job, *self._grown(job, need, placements, borrow=True))
                if self.capped:
                    return
                continue
            reason = (
                said(ReasonCode.QUOTA, why=why)
                if why
                else said(ReasonCode.CAPACITY, shortfall=self.capacity.shortfall(job.plan.shape))
            )
            self._block(job, need, placements, reason, within_quota=within, holds=not why)
            self._stretch(name, job.order, None, self.heads[name], borrowing=True)
            return

    def _grown(
        self, job: QueuedJob, need: Need, placements: list[Placement], *, borrow: bool
    ) -> tuple[Need, list[Placement]]:
        """An elastic job that fits on its fewest systems starts on the most of its range that
        fit now (within its queue's quota, or what it may borrow when `borrow`, and its user's
        cap); a fixed-size job as it is."""
        for plan in job.plan.larger:  # largest first
            bigger = self.need(plan.shape)
            name = job.queue
            allowed = self.book.within(name, bigger) or (
                borrow and not self.book.why_not_borrow(name, bigger)
            )
            if not allowed or never_fits(name, self.book.quotas[name], bigger):
                continue
            if self._capped(job, bigger) is not None:
                continue
            got, complete = self.capacity.place(plan)
            if complete:
                return bigger, got
        return need, placements

    @property
    def capped(self) -> bool:
        return self.limit is not None and len(self.admitted) >= self.limit

    def never(self, job: QueuedJob, need: Need) -> bool:
        """A job its queue's limits can never let run (they changed since it was submitted)
        waits saying so, and holds nothing back: the jobs behind it go on."""
        why = never_fits(job.queue, self.book.quotas[job.queue], need)
        if why:
            self.said[job.job_id] = said(ReasonCode.NEVER_FITS, why=why)
        return bool(why)

    def over_user_cap(self, job: QueuedJob, need: Need) -> bool:
        """A job that would take its user over their cap of running systems, or its array
        over its cap of running tasks, waits saying so, and holds nothing back."""
        why = self._capped(job, need)
        if why is not None:
            self.said[job.job_id] = why
        return why is not None

    def _capped(self, job: QueuedJob, need: Need) -> Reason | None:
        if self.arrays is not None and (why := self.arrays.refusal(job)) is not None:
            return why
        return self.users.refusal(job, need.systems) if self.users is not None else None

    def need(self, shape: PlanShape) -> Need:
        need = self._needs.get(shape)
        if need is None:
            systems = sum(count for role, count, _ in shape if role == Role.CS2.value)
            memoryx = sum(c * d for role, c, d in shape if role == Role.MEMORYX.value)
            need = self._needs[shape] = Need(systems, memoryx)
        return need

    def _fits_behind(self, name: str, shape: PlanShape) -> bool:
        need = self.need(shape)
        return (
            not never_fits(name, self.book.quotas[name], need)
            and self.book.within(name, need)
            and self.capacity.fits(shape)
        )

    def _next_of_shape(self, name: str, shape: PlanShape, after: Order) -> Order | None:
        order = self.index.next_of_shape(name, shape, after)
        while order is not None and self.index.at(name, order).job_id in self.skip:
            order = self.index.next_of_shape(name, shape, order)
        return order

    def _admit(self, job: QueuedJob, need: Need, placements: list[Placement]) -> None:
        self.capacity.take(placements)
        self.book.add(job.queue, need)
        if self.users is not None:
            self.users.take(job, need.systems)
        if self.arrays is not None:
            self.arrays.take(job)
        self.admitted.append(Decision(job.job_id, tuple(placements)))
        self._admitted.add(job.job_id)
        if self.releases is not None:  # it gives its systems back by its limit, too
            ends = None if job.run_limit is None else self.now + job.run_limit
            holdings = tuple((p.node, p.amount) for p in placements)
            self.releases.append(Release(need.systems, ends, holdings))

    def _block(
        self,
        job: QueuedJob,
        need: Need,
        placements: list[Placement],
        reason: Reason,
        *,
        within_quota: bool,
        holds: bool = True,
    ) -> None:
        """`job` is its queue's head: it holds what it can already get (capacity, and its
        quota when it runs within it) so that nothing behind it delays it."""
        if holds:
            self.capacity.take(placements)
            self.capacity.hold_for(job.plan, placements)
        if within_quota:
            self.book.add(job.queue, need)
        head = Head(job, within_quota)
        self.heads[job.queue] = head
        self.heads_in_order.append(head)
        self.said[job.job_id] = reason

    def _stretch(
        self, name: str, start: Order, end: Order | None, head: Head, *, borrowing: bool
    ) -> None:
        counts = self.capacity.counts()
        used = dict(self.book.used)
        stretch = _Stretch(start, end, head, borrowing, counts, used)
        self.stretches.setdefault(name, []).append(stretch)

    # ---- reasons, said when asked -----------------------------------------------------------

    def reason(self, job_id: str) -> Reason | None:
        given = self.said.get(job_id)
        if given is not None:
            return given
        job = self.index.get(job_id)
        if job is None or job_id in self._admitted:
            return None
        capped = self._capped(job, self.need(job.plan.shape))
        if capped is not None:
            return capped  # its user or array holds its cap now, whatever it was stepped over for
        stretches = self.stretches.get(job.queue, [])
        starts = self._starts.get(job.queue)
        if starts is None:
            starts = self._starts[job.queue] = [s.start for s in stretches]
        at = bisect.bisect_left(starts, job.order) - 1
        if at < 0:
            return None
        stretch = stretches[at]
        if stretch.end is not None and job.order >= stretch.end:
            return None
        shape = job.plan.shape
        reason = stretch.said.get(shape)
        if reason is None:
            reason = stretch.said[shape] = self._stepped_over(job.queue, shape, stretch)
        return reason

    def _stepped_over(self, name: str, shape: PlanShape, stretch: _Stretch) -> Reason:
        """Why a job of that shape waited where the pass stepped over it."""
        need = self.need(shape)
        why = never_fits(name, self.book.quotas[name], need)
        if why:
            return said(ReasonCode.NEVER_FITS, why=why)
        if stretch.borrowing or not QuotaBook(self.book.quotas, stretch.used).within(name, need):
            return self._behind(stretch.head, "")
        return self._behind(stretch.head, self.capacity.shortfall(shape, stretch.counts))

    def _behind(self, head: Head, shortfall: str) -> Reason:
        job = head.job
        return said(
            ReasonCode.BEHIND_HIGHER_PRIORITY, shortfall=shortfall, head=job.job_id,
            priority=job.priority.name, systems=job.plan.group(Role.CS2).count,
            queue=job.queue if self.book.shared else "",
        )  # fmt: skip
