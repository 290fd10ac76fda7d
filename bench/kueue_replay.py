"""Kueue's baseline replayed through the admission pass alone (#38): no coordinator, no store.

    python -m bench.kueue_replay [--scale 1.0] [--gap 0.1] [--overhead 0.1]

The workload and queues of bench/kueue_baseline.py, on a simulated clock: a pass
(scheduler/admission.py `admit_backlog`, fair share as each queue's systems held over its
quota) every `--gap` seconds; an admitted job holds its systems for its run time plus
`--overhead` (what the pipeline adds: starting its replicas, reporting its end). What it
answers: what the admission policy itself costs each class, apart from what passes and the
pipeline cost in time, and how the waits grow with that cost (the large class holds its
queue's whole quota, so its queue runs its large jobs one after another: once run time plus
overhead passes Kueue's 1.2 s between them, they queue up).
"""

from __future__ import annotations

import argparse
import heapq
import json

from appliance.domain.backlog import QueuedJob
from appliance.domain.inventory import Node, NodeKind, NodeUsage
from appliance.domain.plan import ReplicaGroup, ReplicaPlan, Role
from appliance.domain.queues import Quota
from appliance.domain.spec import Priority
from appliance.scheduler.admission import admit_backlog
from appliance.scheduler.backlog_index import BacklogIndex
from appliance.scheduler.quotas import Need, QuotaBook
from bench.kueue_baseline import BORROW, CLASSES, QUEUES, QUOTA, schedule


def _plan(systems: int) -> ReplicaPlan:
    groups = (ReplicaGroup(Role.CHIEF, 1), ReplicaGroup(Role.CS2, systems, demand=1))
    return ReplicaPlan(groups=groups, model_bytes=0)


def replay(scale: float, gap: float, overhead: float) -> dict[str, object]:
    plans = {wc.systems: _plan(wc.systems) for wc in CLASSES}
    nodes = [Node(f"cs2-{i:03d}", NodeKind.SYSTEM, 1) for i in range(QUOTA * len(QUEUES))]
    quotas = {q: Quota(QUOTA, 0, borrow_systems=BORROW) for q in QUEUES} | {"default": Quota(0, 0)}
    events = schedule(scale)
    index = BacklogIndex()
    busy: set[str] = set()
    running: list[tuple[float, str, str, list[str], int]] = []  # (ends, job, queue, nodes, n)
    classes: dict[str, tuple[str, float, float]] = {}  # job -> (class, created, run time)
    waits: dict[str, list[float]] = {wc.name: [] for wc in CLASSES}
    now, arrived, passes = 0.0, 0, 0
    while arrived < len(events) or len(index) or running:
        while arrived < len(events) and events[arrived][0] <= now:
            at, queue, wc = events[arrived]
            arrived += 1
            job_id = f"job-{arrived:05d}"
            classes[job_id] = (wc.name, at, wc.runtime)
            index.put(QueuedJob(job_id, Priority[wc.priority], at, plans[wc.systems], queue))
        while running and running[0][0] <= now:
            busy.difference_update(heapq.heappop(running)[3])
        held: dict[str, int] = {}
        for _, _, queue, _, systems in running:
            held[queue] = held.get(queue, 0) + systems
        pool = [NodeUsage(node, int(node.name in busy)) for node in nodes]
        book = QuotaBook(quotas, {q: Need(n, 0) for q, n in held.items()})
        shares = {q: held.get(q, 0) / QUOTA for q in quotas}
        passes += 1
        for decision in admit_backlog(index, pool, book, shares).admitted:
            name, created, runtime = classes[decision.job_id]
            job = index.get(decision.job_id)
            assert job is not None
            index.remove(decision.job_id)
            taken = [p.node for p in decision.placements if p.role is Role.CS2]
            busy.update(taken)
            ends = now + overhead + runtime
            heapq.heappush(running, (ends, decision.job_id, job.queue, taken, len(taken)))
            waits[name].append(now - created)
        now = round(now + gap, 6)
    return {
        "scale": scale, "gap_s": gap, "overhead_s": overhead, "passes": passes,
        "wall_s": round(now, 1),
        "mean_admission_s": {n: round(sum(w) / len(w), 2) for n, w in waits.items() if w},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--gap", type=float, default=0.1, help="seconds between passes")
    parser.add_argument("--overhead", type=float, default=0.1, help="added to each run time")
    args = parser.parse_args()
    print(json.dumps(replay(args.scale, args.gap, args.overhead)))


if __name__ == "__main__":
    main()
