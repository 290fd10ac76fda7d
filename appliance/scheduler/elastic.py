"""When a running elastic job grows (domain/elastic.py): the policy, as a pure decision.

Admission starts an elastic job on the most systems of its range that are free then
(scheduler/admission.py), and a requeue (preemption, restart, reclaim, suspend) re-plans it on
what is free when it is admitted again: it shrinks by itself. Growing back needs a decision:

- only when no job waits that could use the idle systems (the scheduler asks only after a pass
  that left no queue's head blocked: every job still queued is held, waits for another job, or
  is over a cap or limit that idle systems do not lift);
- only a job RUNNING with a model dir (it can checkpoint) that has run its current attempt at
  least `min_run_seconds` (the preemption settings' protection: no job grows twice in a row);
- only to a size of its range whose plan (CS-2s, and the MemoryX and SwarmX it needs) fits on
  what is idle plus what the job holds itself, so that the requeue cannot leave it smaller;
- one job at a time, and none while any job is being stopped: the oldest attempt first;
- never onto a node a reservation holds until its window ends (`reserved`): admission might
  not give it to the job, which would then come back no larger and be asked to grow again;
- through the preemption path: the chief writes a checkpoint, the attempt ends, the job is
  queued again (reason `Growing`) and admitted on its new size, resuming exactly from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence

from appliance.domain.backlog import RunningJob
from appliance.domain.inventory import NodeKind, NodeUsage
from appliance.scheduler.placement import fit


@dataclasses.dataclass(frozen=True)
class Growth:
    """Requeue `job` at a checkpoint: it holds `systems` and will be admitted on `to`."""

    job: RunningJob
    systems: int
    to: int


def to_grow(
    running: Sequence[RunningJob],
    usage: Sequence[NodeUsage],
    now: float,
    min_run_seconds: float,
    reserved: Collection[str] = frozenset(),
) -> Growth | None:
    """The running elastic job to grow now, if any (see the module's policy); `reserved`: the
    nodes of reservations not ended (none of them counts as idle)."""
    if any(job.stopping for job in running):
        return None
    free = {u.node.name: 0 if u.node.name in reserved else u.free for u in usage}
    kinds = {u.node.name: u.node.kind for u in usage}
    if not any(room >= 1 for name, room in free.items() if kinds[name] is NodeKind.SYSTEM):
        return None
    for job in sorted(running, key=lambda r: (r.scheduled_at, r.job_id)):
        plan = job.elastic
        if plan is None or not job.checkpointable or now - job.scheduled_at < min_run_seconds:
            continue
        held = sum(1 for node, _ in job.holdings if kinds.get(node) is NodeKind.SYSTEM)
        trial = dict(free)
        for node, amount in job.holdings:
            if node in trial:
                trial[node] += amount
        for bigger in plan.larger:  # largest first
            if bigger.systems <= held:
                break
            if not fit(bigger, trial, kinds)[1]:
                return Growth(job, held, bigger.systems)
    return None
