"""Admission around reservations (domain/reservations.py): a pure decision, on admission's.

For a job J at `now`, a node is *blocked* when a reservation holding it overlaps
[now, now + J's remaining time limit) (no limit: for ever) and J is not one of its users,
groups or queue (a maintenance one: nobody's). So a job whose limit would run into a
maintenance window waits, or runs on other nodes; one that ends before it runs. Jobs fall into
*classes* by their blocked set and by the nodes reserved for them now (placed on first: "used
first for them"). With no reservation that matters to any job there is one class and the pass
is admission's, unchanged. Otherwise admission runs once per class on the pool without its
blocked nodes, the classes holding reservations first, then by their first job in queue order;
what each class admitted is taken from the pool of the next (the heads' holds, within a class,
are not carried: two classes' heads never hold for each other). The quota book and the
per-user and per-array caps are shared by the classes, so every cap holds across them.

A head of a class with blocked nodes that waits for capacity waits for the reservation
(`ReasonCode.RESERVATION`, naming the reservations that block it).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Iterable, Mapping, Sequence

from appliance.domain.backlog import QueuedJob, Release
from appliance.domain.inventory import NodeUsage
from appliance.domain.reasons import Reason, ReasonCode, said
from appliance.domain.reservations import Reservation
from appliance.scheduler.admission import Admission, Decision, Head, admit_backlog
from appliance.scheduler.array_caps import ArrayCaps
from appliance.scheduler.backlog_index import BacklogIndex
from appliance.scheduler.quotas import QuotaBook
from appliance.scheduler.user_caps import UserCaps


@dataclasses.dataclass(frozen=True)
class JobClass:
    """Jobs that may not use `blocked` now (for the maintenance reservations named
    `maint_by` and the others' named `by`) and are placed first on `first` (reserved for
    them); `unlimited`: those of its jobs with no time limit (said in why they wait)."""

    blocked: frozenset[str]
    first: frozenset[str]
    job_ids: frozenset[str]
    by: tuple[str, ...] = ()
    maint_by: tuple[str, ...] = ()
    unlimited: frozenset[str] = frozenset()

    @property
    def maint(self) -> bool:
        """Whether a maintenance reservation keeps its jobs off nodes."""
        return bool(self.maint_by)


def blocked_for(
    job: QueuedJob, reservations: Iterable[Reservation], now: float
) -> tuple[frozenset[str], tuple[str, ...], tuple[str, ...]]:
    """(nodes, names of the reservations for others, names of the maintenance ones) the job
    may not use if it started now and ran its whole remaining limit."""
    end = math.inf if job.run_limit is None else now + job.run_limit
    nodes: set[str] = set()
    names: list[str] = []
    maint: list[str] = []
    for r in reservations:
        if r.overlaps(now, end) and not r.admits(job.user, job.groups, job.queue):
            nodes.update(r.nodes)
            (maint if r.maint else names).append(r.name)
    return frozenset(nodes), tuple(names), tuple(maint)


def reserved_for(
    job: QueuedJob, reservations: Iterable[Reservation], now: float
) -> frozenset[str]:
    """The nodes of the reservations active now that admit the job."""
    return frozenset(
        node
        for r in reservations
        if r.active(now) and r.admits(job.user, job.groups, job.queue)
        for node in r.nodes
    )


def classes(
    jobs: Iterable[QueuedJob], reservations: Sequence[Reservation], now: float
) -> list[JobClass]:
    """The jobs' classes in the order admission serves them: those with reserved nodes first,
    then each by its first job in queue order."""
    members: dict[tuple[frozenset[str], frozenset[str]], list[QueuedJob]] = {}
    said_by: dict[tuple[frozenset[str], frozenset[str]], tuple[str, ...]] = {}
    maint_by: dict[tuple[frozenset[str], frozenset[str]], tuple[str, ...]] = {}
    for job in jobs:
        blocked, by, maint = blocked_for(job, reservations, now)
        key = (blocked, reserved_for(job, reservations, now))
        members.setdefault(key, []).append(job)
        said_by.setdefault(key, by)
        maint_by.setdefault(key, maint)
    ordered = sorted(members.items(), key=lambda kv: (not kv[0][1], min(j.order for j in kv[1])))
    return [
        JobClass(
            blocked,
            first,
            frozenset(j.job_id for j in jobs_of),
            said_by[(blocked, first)],
            maint_by[(blocked, first)],
            frozenset(j.job_id for j in jobs_of if j.run_limit is None),
        )
        for (blocked, first), jobs_of in ordered
    ]


def admit_around(
    index: BacklogIndex,
    pool: Sequence[NodeUsage],
    reservations: Sequence[Reservation],
    now: float,
    book: QuotaBook | None = None,
    shares: Mapping[str, float] | None = None,
    skip: Collection[str] = frozenset(),
    limit: int | None = None,
    users: UserCaps | None = None,
    arrays: ArrayCaps | None = None,
    releases: Sequence[Release] | None = None,
) -> Admission | ClassAdmissions:
    """`admit_backlog` keeping the reservations (those ended are ignored)."""
    live = [r for r in reservations if r.end > now]
    found: list[JobClass] = []
    if live:  # else admission's own pass, and not even a walk of the queue before it
        jobs = (
            job
            for name in index.queues()
            for job in index.in_order(name)
            if job.job_id not in skip
        )
        found = classes(jobs, live, now)
    if len(found) <= 1 and not (found and (found[0].blocked or found[0].first)):
        return admit_backlog(index, pool, book, shares, skip, limit, users, arrays, releases, now)
    everyone = frozenset(index.job_ids())
    taken: dict[str, int] = {}
    parts: list[tuple[Admission, JobClass]] = []
    admitted = 0
    for job_class in found:
        left = None if limit is None else limit - admitted
        if left is not None and left <= 0:
            break
        class_pool = [
            NodeUsage(u.node, u.used + taken.get(u.node.name, 0))
            for u in pool
            if u.node.name not in job_class.blocked
        ]
        class_skip = frozenset(skip) | (everyone - job_class.job_ids)
        part = admit_backlog(
            index, class_pool, book, shares, class_skip, left, users, arrays, releases, now,
            job_class.first,
        )  # fmt: skip
        for decision in part.admitted:
            for p in decision.placements:
                taken[p.node] = taken.get(p.node, 0) + p.amount
        admitted += len(part.admitted)
        parts.append((part, job_class))
    return ClassAdmissions(parts, limit is not None and admitted >= limit)


class ClassAdmissions:
    """What a pass over several classes decided, read as one `Admission` is."""

    def __init__(self, parts: list[tuple[Admission, JobClass]], capped: bool) -> None:
        self._parts = parts
        self.admitted: list[Decision] = [d for part, _ in parts for d in part.admitted]
        self.heads: tuple[Head, ...] = tuple(h for part, _ in parts for h in part.heads)
        self.capped = capped
        self._class_of = {
            job_id: at for at, (_, job_class) in enumerate(parts) for job_id in job_class.job_ids
        }

    @property
    def head(self) -> QueuedJob | None:
        return self.heads[0].job if self.heads else None

    def why(self, job_id: str) -> Reason | None:
        at = self._class_of.get(job_id)
        if at is None:
            return None
        part, job_class = self._parts[at]
        why = part.why(job_id)
        if why is not None and why.code is ReasonCode.CAPACITY and job_class.blocked:
            return said(
                ReasonCode.RESERVATION, names=job_class.by, maint=job_class.maint_by,
                unlimited=job_id in job_class.unlimited, shortfall=why.params.get("shortfall", ""),
            )  # fmt: skip
        return why

    def reason(self, job_id: str) -> str | None:
        why = self.why(job_id)
        return why.message if why is not None else None

    @property
    def pending_reasons(self) -> dict[str, Reason]:
        return {
            job_id: why
            for part, _ in self._parts
            for job_id in part.pending_reasons
            if (why := self.why(job_id)) is not None
        }

    @property
    def pending(self) -> dict[str, str]:
        return {job_id: why.message for job_id, why in self.pending_reasons.items()}
