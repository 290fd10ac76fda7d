"""admit() across queues: quotas first, then borrowing in fair-share order within the cohort's
lendable capacity and each queue's limit; per-queue heads; reclaim candidates (reclaim.py)."""

from __future__ import annotations

import dataclasses

from appliance.domain.backlog import QueuedJob, RunningJob
from appliance.domain.inventory import NodeKind
from appliance.domain.queues import Quota
from appliance.domain.reasons import ReasonCode
from appliance.domain.spec import Priority
from appliance.scheduler.admission import admit
from appliance.scheduler.preemption import choose_victims
from appliance.scheduler.quotas import Need, QuotaBook
from appliance.scheduler.reclaim import borrowers, queue_holdings
from tests.unit.scheduler.test_gang_admission import GIB, admitted, job, pool

MEMX = 64 * GIB  # what pool() below holds: 4 MemoryX nodes of 16 GiB


def quotas(**systems: int) -> dict[str, Quota]:
    """Queues of that many systems (and the matching part of 64 GiB of MemoryX)."""
    return {
        name: Quota(count, MEMX * count // 4) for name, count in {"default": 0, **systems}.items()
    }


def in_queue(queued: QueuedJob, queue: str) -> QueuedJob:
    return dataclasses.replace(queued, queue=queue)


def four_systems() -> list:  # type: ignore[type-arg]
    return pool(systems=4, memx=(16 * GIB,) * 4, swarmx=(4, 4))


def test_each_queue_runs_within_its_quota_before_any_borrows() -> None:
    """nlp's second job would borrow; vision's job is within its quota: vision goes first even
    though nlp's jobs are older and nlp has the lower share."""
    queue = [
        in_queue(job("nlp-1", 2, at=1), "nlp"),
        in_queue(job("nlp-2", 2, at=2), "nlp"),
        in_queue(job("vision-1", 2, at=3), "vision"),
    ]
    book = QuotaBook(quotas(nlp=2, vision=2), {})
    result = admit(queue, four_systems(), book, {"nlp": 0.0, "vision": 5.0})
    assert admitted(result) == ["nlp-1", "vision-1"]
    assert (
        result.pending["nlp-2"] == "queue nlp uses 2 of its 2 systems; cohort has 0 idle to lend"
    )
    assert result.pending_reasons["nlp-2"].code is ReasonCode.QUOTA


def test_a_queue_borrows_idle_quota_and_the_lowest_share_borrows_first() -> None:
    queue = [
        in_queue(job("nlp-1", 2, at=1), "nlp"),
        in_queue(job("nlp-2", 2, at=2), "nlp"),
        in_queue(job("vision-1", 2, at=3), "vision"),
        in_queue(job("vision-2", 2, at=4), "vision"),
    ]
    used = {"nlp": Need(0, 0), "vision": Need(0, 0)}
    pool_ = four_systems()
    # Both within quota first (2 + 2); nothing left to borrow.
    assert admitted(admit(queue, pool_, QuotaBook(quotas(nlp=2, vision=2), used))) == [
        "nlp-1", "vision-1",
    ]  # fmt: skip
    # Quotas of 0 (everything is the default queue's, idle): the lower share borrows first.
    book = QuotaBook(quotas(nlp=0, vision=0) | {"default": Quota(4, MEMX)}, {})
    result = admit(queue, pool_, book, {"nlp": 3.0, "vision": 1.0})
    assert admitted(result) == ["vision-1", "vision-2"]
    assert result.pending["nlp-1"].startswith("queue nlp uses 0 of its 0 systems; cohort has 0")


def test_a_borrowing_limit_and_a_queue_that_does_not_lend() -> None:
    queue = [in_queue(job("nlp-1", 4, at=1), "nlp")]
    limited = quotas(nlp=2, vision=2)
    limited["nlp"] = dataclasses.replace(limited["nlp"], borrow_systems=1)
    # A job its queue may never hold waits saying so, and does not hold up the ones behind.
    small = in_queue(job("nlp-2", 1, at=2), "nlp")
    result = admit([*queue, small], four_systems(), QuotaBook(limited, {}))
    assert result.pending_reasons["nlp-1"].code is ReasonCode.NEVER_FITS
    assert result.pending["nlp-1"] == (
        "can never run: queue nlp may hold at most 3 systems (its quota and borrowing limit); "
        "the job needs 4"
    )
    assert admitted(result) == ["nlp-2"] and not result.heads
    # Holding 2 already, a 2-system job would borrow 2: over the limit of 1.
    pair = [in_queue(job("nlp-3", 2, at=3), "nlp")]
    result = admit(pair, four_systems(), QuotaBook(limited, {"nlp": Need(2, 2 * GIB)}))
    assert result.pending["nlp-3"] == (
        "queue nlp may borrow at most 1 system beyond its 2 and needs 2 systems more"
    )
    private = quotas(nlp=2, vision=2)
    private["vision"] = dataclasses.replace(private["vision"], lend=False)
    result = admit(queue, four_systems(), QuotaBook(private, {}))
    assert result.pending["nlp-1"].endswith("cohort has 0 idle to lend")
    lending = admit(queue, four_systems(), QuotaBook(quotas(nlp=2, vision=2), {}))
    assert admitted(lending) == ["nlp-1"]


def test_the_head_of_a_queue_keeps_its_quota_from_the_jobs_behind_it() -> None:
    """nlp's head needs 2 systems and only 1 is free (a borrower of vision holds the other):
    it holds the free one and its quota; the 1-system job behind it waits, naming it."""
    queue = [
        in_queue(job("nlp-big", 2, at=1), "nlp"),
        in_queue(job("nlp-small", 1, at=2), "nlp"),
    ]
    usage = pool(systems=4, memx=(16 * GIB,) * 4, swarmx=(4, 4), used={
        "cs2-01": 1, "cs2-02": 1, "cs2-03": 1, "memx-01": GIB, "swarmx-01": 3,
    })  # fmt: skip
    book = QuotaBook(quotas(nlp=2, vision=2), {"vision": Need(3, 3 * GIB)})
    result = admit(queue, usage, book)
    assert admitted(result) == []
    [head] = result.heads
    assert head.job.job_id == "nlp-big" and head.within_quota
    assert result.pending["nlp-big"] == "needs 2 systems, 1 free"
    assert result.pending["nlp-small"] == "behind nlp-big (P2, 2 systems) in queue nlp"
    codes = {job_id: why.code for job_id, why in result.pending_reasons.items()}
    assert codes == {
        "nlp-big": ReasonCode.CAPACITY, "nlp-small": ReasonCode.BEHIND_HIGHER_PRIORITY,
    }  # fmt: skip


def test_one_default_queue_is_todays_single_queue() -> None:
    queue = [job("a", 4, at=1), job("b", 1, at=2)]
    result = admit(queue, pool(systems=4, used={"cs2-01": 1}))
    assert admitted(result) == []
    reason = result.pending["b"]  # as ever: no queue named
    assert reason.startswith("needs 1 system, 0 free;") and reason.endswith(
        "; behind a (P2, 4 systems)"
    )


def _running(
    job_id: str, queue: str, systems: list[str], at: float, priority: Priority = Priority.P2
) -> RunningJob:
    holdings = (*((s, 1) for s in systems), ("memx-01", GIB))
    return RunningJob(
        job_id, priority, holdings, preemptible=True, queue=queue, scheduled_at=at,
        checkpointable=True,
    )  # fmt: skip


def test_reclaim_takes_the_youngest_borrowers_just_enough_to_fit() -> None:
    """nlp (quota 2) runs 3 jobs of 1 system (one borrowed from vision); vision's 1-system
    job is within its quota: the youngest of nlp's jobs is stopped, and only it."""
    kinds = {f"cs2-{i:02d}": NodeKind.SYSTEM for i in range(1, 5)} | {"memx-01": NodeKind.MEMORYX}
    running = [
        _running("nlp-old", "nlp", ["cs2-01"], at=10),
        _running("nlp-mid", "nlp", ["cs2-02"], at=20),
        _running("nlp-young", "nlp", ["cs2-03"], at=30),
        _running("default-1", "default", ["cs2-04"], at=40),
    ]
    head = in_queue(job("vision-1", 1, at=50), "vision")
    q = quotas(nlp=2, vision=2) | {"default": Quota(0, 0)}
    assert queue_holdings(running, kinds)["nlp"] == Need(3, 3 * GIB)
    # default (quota 0) and nlp (3 of 2) both borrow: youngest first, each only while over.
    candidates = borrowers(head, running, q, kinds, now=100)
    assert [c.job_id for c in candidates] == ["default-1", "nlp-young"]
    usage = pool(systems=4, memx=(16 * GIB,) * 4, swarmx=(4, 4), used={
        "cs2-01": 1, "cs2-02": 1, "cs2-03": 1, "cs2-04": 1, "memx-01": 4 * GIB,
    })  # fmt: skip
    chosen = choose_victims(head, running, usage, 100, candidates)
    assert chosen is not None and [v.job_id for v in chosen.victims] == ["default-1"]


def test_reclaim_spares_a_protected_or_unpreemptible_borrower() -> None:
    kinds = {"cs2-01": NodeKind.SYSTEM, "cs2-02": NodeKind.SYSTEM, "memx-01": NodeKind.MEMORYX}
    protected = dataclasses.replace(
        _running("nlp-2", "nlp", ["cs2-02"], at=30), protected_until=200
    )
    running = [_running("nlp-1", "nlp", ["cs2-01"], at=20), protected]
    head = in_queue(job("vision-1", 1, at=50), "vision")
    q = {"default": Quota(0, 0), "nlp": Quota(1, GIB), "vision": Quota(1, GIB)}
    assert borrowers(head, running, q, kinds, now=100) == []  # the borrower is protected
    assert [c.job_id for c in borrowers(head, running, q, kinds, now=300)] == ["nlp-2"]


def test_a_large_head_gets_its_queues_quota_within_a_few_passes_while_small_jobs_arrive() -> None:
    """Kueue's baseline in small (#38): three queues of 4 systems that borrow; every pass each
    queue gets five more 1-system P3 jobs (more than the cohort runs), each running one pass. A
    4-system P1 job of nlp (its whole quota) starts within two passes: its queue starts
    nothing behind it and no other queue borrows what nlp's jobs give back."""
    from appliance.domain.inventory import Node, NodeUsage
    from appliance.domain.plan import ReplicaGroup, ReplicaPlan, Role
    from appliance.scheduler.admission import admit_backlog
    from appliance.scheduler.backlog_index import BacklogIndex

    def plan(systems: int) -> ReplicaPlan:
        groups = (ReplicaGroup(Role.CHIEF, 1), ReplicaGroup(Role.CS2, systems, demand=1))
        return ReplicaPlan(groups=groups, model_bytes=0)

    names = ("nlp", "vision", "speech")
    limits = {n: Quota(4, 0, borrow_systems=8) for n in names} | {"default": Quota(0, 0)}
    nodes = [Node(f"cs2-{i:02d}", NodeKind.SYSTEM, 1) for i in range(12)]
    index = BacklogIndex()
    running: dict[str, tuple[str, list[str]]] = {}  # job -> (queue, systems), for one pass
    large_at = None
    for n in range(12):
        for queue in names:
            for k in range(5):
                at = float(n * 10 + k)
                index.put(QueuedJob(f"{queue}-{n}-{k}", Priority.P3, at, plan(1), queue))
        if n == 4:
            index.put(QueuedJob("nlp-large", Priority.P1, float(n * 10 + 5), plan(4), "nlp"))
        busy = {s for _, systems in running.values() for s in systems}
        held: dict[str, Need] = {}
        for queue, systems in running.values():
            held[queue] = held.get(queue, Need(0, 0)).plus(Need(len(systems), 0))
        pool_ = [NodeUsage(node, int(node.name in busy)) for node in nodes]
        result = admit_backlog(index, pool_, QuotaBook(limits, held), {q: 0.0 for q in names})
        running = {}  # the last pass's jobs have ended
        for decision in result.admitted:
            job_ = index.get(decision.job_id)
            assert job_ is not None
            index.remove(decision.job_id)
            running[decision.job_id] = (job_.queue, [p.node for p in decision.placements])
            if decision.job_id == "nlp-large":
                large_at = n
    assert large_at is not None and large_at - 4 <= 2
