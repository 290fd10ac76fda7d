"""What the scheduler decides on and hands back: a queued job's entry and a replica's place."""

from __future__ import annotations

import dataclasses

from appliance.domain.plan import ReplicaPlan, Role
from appliance.domain.spec import Priority


@dataclasses.dataclass(frozen=True)
class QueuedJob:
    """A job waiting in the queue, as admission sees it."""

    job_id: str
    priority: Priority
    created_at: float
    plan: ReplicaPlan

    @property
    def order(self) -> tuple[int, float, str]:
        return (int(self.priority), self.created_at, self.job_id)


@dataclasses.dataclass(frozen=True)
class Placement:
    """One replica on one node, with the amount of the node it takes."""

    replica: str
    role: Role
    node: str
    amount: int
