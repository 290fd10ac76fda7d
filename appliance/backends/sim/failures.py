"""Which replica of an attempt the simulated backend kills, and at which step.

Two sources, the earliest failure wins: the named ones (APPLIANCE_SIM_FAIL_AT, on a job's
first attempt only, so its restart succeeds) and the rate (APPLIANCE_SIM_FAILURE_RATE: each
replica of each attempt fails with that probability, at a step drawn uniformly from the steps
the attempt has left). The draws depend only on the seed, the job, the attempt and the
replica, not on the order jobs run in: one seed gives one set of failures.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable, Sequence

from appliance.domain.simulation import FailAt


@dataclasses.dataclass(frozen=True)
class Failure:
    """`replica` is killed once its job has done `step` steps; `why` goes in its exit message."""

    replica: str
    step: int
    why: str


class FailurePlan:
    def __init__(
        self, rate: float = 0.0, fail_at: Iterable[FailAt] = (), seed: int | None = None
    ) -> None:
        self.rate = rate
        self.fail_at = {f.replica: f.step for f in fail_at}
        self.seed = seed if seed is not None else random.SystemRandom().getrandbits(64)

    def first_failure(
        self, job_id: str, attempt: int, replicas: Sequence[str], start: int, num_steps: int
    ) -> Failure | None:
        """The failure that ends `attempt` of the job, which runs steps start..num_steps (a
        failure at step k: k steps done, before the last), or None."""
        found = []
        if attempt <= 1:
            for name in replicas:
                step = self.fail_at.get(name)
                if step is not None and start <= step < num_steps:
                    found.append(Failure(name, step, f"APPLIANCE_SIM_FAIL_AT {name}@{step}"))
        if self.rate and start < num_steps:
            for name in replicas:
                draw = random.Random(f"{self.seed}/{job_id}/{attempt}/{name}")
                if draw.random() < self.rate:
                    step = draw.randrange(start, num_steps)
                    found.append(Failure(name, step, f"APPLIANCE_SIM_FAILURE_RATE {self.rate:g}"))
        return min(found, key=lambda f: (f.step, f.replica), default=None)
