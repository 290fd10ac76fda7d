"""Reclaim: a queue below its quota takes back what other queues borrow of the pool.

When a queue's head would run within its queue's quota but does not fit, the capacity it is
owed is lent out: jobs of queues running beyond their quota are preempted for it (checkpoint
now, requeue, exact resume: the same mechanism as a preemption by priority), whatever their
priority. Only borrowers are candidates: of each queue over its quota, its youngest jobs
(latest to get their resources) while the queue, without the younger ones, is still over its
quota. The fewest that make room are chosen (scheduler/preemption.py), youngest first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from appliance.domain.backlog import QueuedJob, RunningJob
from appliance.domain.inventory import NodeKind
from appliance.domain.queues import Quota
from appliance.scheduler.quotas import NOTHING, Need, QuotaBook


def holding(job: RunningJob, kinds: Mapping[str, NodeKind]) -> Need:
    """What a running job holds against its queue's quota."""
    systems = memoryx = 0
    for node, amount in job.holdings:
        kind = kinds.get(node)
        if kind is NodeKind.SYSTEM:
            systems += 1
        elif kind is NodeKind.MEMORYX:
            memoryx += amount
    return Need(systems, memoryx)


def queue_holdings(
    running: Sequence[RunningJob], kinds: Mapping[str, NodeKind]
) -> dict[str, Need]:
    """What each queue's running jobs hold."""
    used: dict[str, Need] = {}
    for job in running:
        used[job.queue] = used.get(job.queue, NOTHING).plus(holding(job, kinds))
    return used


def borrowers(
    head: QueuedJob,
    running: Sequence[RunningJob],
    quotas: Mapping[str, Quota],
    kinds: Mapping[str, NodeKind],
    now: float,
) -> list[RunningJob]:
    """The jobs a reclaim for `head` may stop, youngest first (not those that may not be
    preempted, nor one preempted before that has not run its minimum run time yet)."""
    used = queue_holdings([r for r in running if not r.stopping], kinds)
    candidates: list[RunningJob] = []
    # Youngest first; of jobs admitted in the same pass, the one its queue took last.
    youngest = sorted(
        running, key=lambda r: (-r.scheduled_at, -int(r.priority), -r.created_at, r.job_id)
    )
    for job in youngest:
        quota = quotas.get(job.queue, Quota(0, 0))
        if job.stopping or job.queue == head.queue:
            continue
        left = used.get(job.queue, NOTHING)
        if left.systems <= quota.systems and left.memoryx_bytes <= quota.memoryx_bytes:
            continue  # its queue is within its quota without its younger jobs
        if job.preemptible and job.protected_until <= now:
            candidates.append(job)
        used[job.queue] = left.minus(holding(job, kinds))
    return candidates


def quota_room(
    head: QueuedJob,
    running: Sequence[RunningJob],
    quotas: Mapping[str, Quota],
    kinds: Mapping[str, NodeKind],
) -> Callable[[Sequence[RunningJob]], bool]:
    """room(victims) for choose_victims: whether the head's queue may run it (within its
    quota, or borrowing what the cohort can lend) once the victims and the jobs already
    stopping are gone."""
    base = queue_holdings([r for r in running if not r.stopping], kinds)
    need = Need.of(head.plan)
    quotas = {**quotas, head.queue: quotas.get(head.queue, Quota(0, 0))}

    def room(victims: Sequence[RunningJob]) -> bool:
        used = dict(base)
        for victim in victims:
            used[victim.queue] = used.get(victim.queue, NOTHING).minus(holding(victim, kinds))
        book = QuotaBook(quotas, used)
        return book.within(head.queue, need) or not book.why_not_borrow(head.queue, need)

    return room
