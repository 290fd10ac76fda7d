"""What the scheduler decides on and hands back: a queued job's entry and a replica's place."""

from __future__ import annotations

import dataclasses

from appliance.domain.holds import Hold
from appliance.domain.plan import ReplicaPlan, Role
from appliance.domain.queues import DEFAULT_QUEUE
from appliance.domain.spec import Priority


@dataclasses.dataclass(frozen=True)
class QueuedJob:
    """A job waiting in the queue, as admission sees it."""

    job_id: str
    priority: Priority
    created_at: float
    plan: ReplicaPlan
    queue: str = DEFAULT_QUEUE
    # Its owner and their groups at submit time (a per-user cap of running systems).
    user: str = ""
    groups: tuple[str, ...] = ()
    # Held (domain/holds.py): admission steps over it, and it keeps its place in the queue.
    hold: Hold | None = None
    # What is left of its time limit (domain/time_limits.py), in seconds; None: no limit.
    run_limit: float | None = None

    @property
    def order(self) -> tuple[int, float, str]:
        return (int(self.priority), self.created_at, self.job_id)


@dataclasses.dataclass(frozen=True)
class Release:
    """`systems` CS-2 systems a job holding them gives back at `ends_at` by its time limit
    (None: unknown, it has none): what backfill by time limits decides on
    (scheduler/backfill.py)."""

    systems: int
    ends_at: float | None
    # (node, amount) of everything it holds (a shadow time is when the head's plan fits).
    holdings: tuple[tuple[str, int], ...] = ()


@dataclasses.dataclass(frozen=True)
class Placement:
    """One replica on one node, with the amount of the node it takes."""

    replica: str
    role: Role
    node: str
    amount: int


@dataclasses.dataclass(frozen=True)
class RunningJob:
    """A job holding resources, as preemption sees it."""

    job_id: str
    priority: Priority
    # (node, amount) of every placement it holds.
    holdings: tuple[tuple[str, int], ...]
    preemptible: bool
    attempt: int = 0
    # Not to be preempted before this time (a job preempted before runs a while first).
    protected_until: float = 0.0
    # Steps done since its newest checkpoint: the work a preemption without one would lose.
    at_risk: int = 0
    # Already asked to stop (a requeue is under way): its resources are coming back.
    stopping: bool = False
    # The job its preemption makes room for, if it is being preempted.
    preempted_by: str = ""
    # Its chief can write a checkpoint when asked (it is RUNNING and has a model dir).
    checkpointable: bool = False
    queue: str = DEFAULT_QUEUE
    # When its attempt got its resources, and when it was submitted (the youngest borrowers
    # are reclaimed first).
    scheduled_at: float = 0.0
    created_at: float = 0.0
    # An elastic job's plan (domain/elastic.py: its larger sizes with it); None: fixed size.
    elastic: ReplicaPlan | None = None
