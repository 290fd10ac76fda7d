"""Preemption: which running jobs make room for the queue's head, a pure function.

Only the head (the first job in queue order that did not fit) may preempt, and only running
jobs of its own queue of strictly lower priority that may be preempted (`preemptible`, and
not protected: a job preempted before runs APPLIANCE_PREEMPTION_MIN_RUN_SECONDS of its next
attempt first). Victims are chosen to lose the least work: the fewest jobs; among sets of
that size, the first in the order lowest priority first, then least progress since their
newest checkpoint. Sets are tried smallest first in that order, up to SEARCH_BUDGET fit
checks; past it, candidates are taken in that order until the head fits and then every
victim the head can do without is handed back, the most costly first (the minimal-set pass
Kueue makes). Nothing is preempted when the head would not fit even with every candidate
stopped. A reclaim (scheduler/reclaim.py) chooses among other queues' borrowers the same way.
At fixed priorities two jobs can never preempt each other back and forth: each would need a
strictly lower priority than the other. When priorities change, a job that was preempted
runs the minimum run time of its next attempt before it can be preempted again, so no job is
stopped over and over.

Resources of jobs already stopping count as coming back: while they do, the head waits for
them instead of choosing more victims.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence, Set

from appliance.domain.backlog import QueuedJob, RunningJob
from appliance.domain.inventory import NodeKind, NodeState, NodeUsage
from appliance.scheduler.placement import fits

SEARCH_BUDGET = 2_000


@dataclasses.dataclass(frozen=True)
class Preemption:
    """The jobs to stop now for the head, and those already stopping that it waits for."""

    victims: tuple[RunningJob, ...]
    waiting_for: tuple[RunningJob, ...]


Room = Callable[[Sequence[RunningJob]], bool]


def anywhere(victims: Sequence[RunningJob]) -> bool:
    """No quota to respect: room is only a matter of fitting the pool."""
    return True


@dataclasses.dataclass(frozen=True)
class PoolFree:
    """The pool as a preemption search reads it: the nodes in service, the nodes of each
    kind, every node's free room. Made once per pass (`of`) for all of its heads: on a pool
    of a thousand nodes, making it again for each head (twice for one that waits on exempt
    jobs) cost a pass about as much as its admissions."""

    usable: Set[str]
    names: Mapping[NodeKind, Sequence[str]]
    free: Mapping[str, int]

    @classmethod
    def of(cls, pool: Sequence[NodeUsage]) -> PoolFree:
        names: dict[NodeKind, list[str]] = {}
        for u in pool:
            names.setdefault(u.node.kind, []).append(u.node.name)
        return cls(
            frozenset(u.node.name for u in pool if u.node.state is NodeState.OK),
            {kind: tuple(nodes) for kind, nodes in names.items()},
            {u.node.name: u.free for u in pool},
        )


def choose_victims(
    head: QueuedJob,
    running: Sequence[RunningJob],
    pool: Sequence[NodeUsage] | PoolFree,
    now: float,
    candidates: Sequence[RunningJob] | None = None,
    room: Room = anywhere,
    fewest: bool = True,
) -> Preemption | None:
    """The preemption that lets `head` fit, or None when none does (or none is needed).
    `candidates`: the jobs it may stop, in the order to try them (a reclaim's borrowers);
    by default its own queue's jobs of lower priority that may be preempted. `room(victims)`:
    whether its queue's quota lets it run once those are gone (besides fitting the pool).
    `fewest`: prefer the fewest victims over the candidates' order (a reclaim takes them in
    order, just enough)."""
    view = pool if isinstance(pool, PoolFree) else PoolFree.of(pool)
    usable, names, free = view.usable, view.names, dict(view.free)
    stopping = [r for r in running if r.stopping]
    for job in stopping:
        _give_back(free, job, usable)
    if fits(head.plan, free, names) and room(()):
        mine = tuple(r for r in stopping if r.preempted_by == head.job_id)
        return Preemption((), mine) if mine else None
    if candidates is None:
        candidates = sorted(
            (r for r in running if _below(head, r) and not _exempt(r, now)),
            key=lambda r: (-int(r.priority), r.at_risk, r.job_id),
        )
    search = _Search(head, free, names, usable, room)
    greedy = search.greedy(candidates)
    if greedy is None:
        return None
    chosen = (search.smallest(candidates, len(greedy)) if fewest else None) or greedy
    waiting = tuple(r for r in stopping if r.preempted_by == head.job_id)
    return Preemption(tuple(chosen), waiting)


def exempt_in_the_way(
    head: QueuedJob,
    running: Sequence[RunningJob],
    pool: Sequence[NodeUsage] | PoolFree,
    now: float,
    room: Room = anywhere,
) -> tuple[tuple[str, float], ...]:
    """The jobs that may not be preempted (opted out: until 0; preempted recently: until
    when they may be again) that keep the head waiting, to add to its reason (the `exempt`
    note); none when they are not what keeps it waiting: the victims it would choose were
    they all fair game. No search when none of the head's candidates is exempt."""
    if not any(_below(head, r) and _exempt(r, now) for r in running):
        return ()
    freed = [
        dataclasses.replace(r, preemptible=True, protected_until=0.0) if _below(head, r) else r
        for r in running
    ]
    chosen = choose_victims(head, freed, pool, now, room=room)
    if chosen is None or not chosen.victims:
        return ()
    held = {r.job_id: r for r in running if _exempt(r, now)}
    return tuple(
        (v.job_id, held[v.job_id].protected_until if held[v.job_id].preemptible else 0.0)
        for v in chosen.victims
        if v.job_id in held
    )


@dataclasses.dataclass(frozen=True)
class _Search:
    """Sets of victims tried for one head: it must fit the pool once they are gone, and
    `room` must say its quota lets it run."""

    head: QueuedJob
    free: dict[str, int]
    names: Mapping[NodeKind, Sequence[str]]
    usable: Set[str]
    room: Room

    def makes_room(self, victims: Sequence[RunningJob]) -> bool:
        scratch = dict(self.free)
        for job in victims:
            _give_back(scratch, job, self.usable)
        return fits(self.head.plan, scratch, self.names) and self.room(victims)

    def greedy(self, candidates: Sequence[RunningJob]) -> list[RunningJob] | None:
        """Candidates in order until the head fits, then those it can do without handed
        back, the last taken first."""
        chosen: list[RunningJob] = []
        for job in candidates:
            chosen.append(job)
            if self.makes_room(chosen):
                break
        else:
            return None
        for job in reversed(chosen[:-1]):
            without = [j for j in chosen if j is not job]
            if self.makes_room(without):
                chosen = without
        return chosen

    def smallest(self, candidates: Sequence[RunningJob], bound: int) -> list[RunningJob] | None:
        """The first set (in candidate order) of fewer than `bound` jobs that makes room, if
        one is found within SEARCH_BUDGET checks."""
        budget = SEARCH_BUDGET
        for size in range(1, bound):
            for group in itertools.combinations(candidates, size):
                budget -= 1
                if budget < 0:
                    return None
                if self.makes_room(group):
                    return list(group)
        return None


def _below(head: QueuedJob, r: RunningJob) -> bool:
    """A job the head may preempt unless it is exempt: of its queue, of lower priority, not
    stopping already."""
    return not r.stopping and r.queue == head.queue and int(r.priority) > int(head.priority)


def _exempt(r: RunningJob, now: float) -> bool:
    """Opted out of preemption, or preempted recently (protected until its minimum run)."""
    return not r.preemptible or r.protected_until > now


def _give_back(free: dict[str, int], job: RunningJob, usable: Set[str], sign: int = 1) -> None:
    for node, amount in job.holdings:
        if node in usable:  # a node out of service gives nothing back
            free[node] = free.get(node, 0) + sign * amount
