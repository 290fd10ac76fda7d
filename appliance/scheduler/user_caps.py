"""Per-user caps in admission: the cluster-wide cap of running systems (Slurm's
MaxTRESPerUser, #36: the CS-2 systems one user's admitted jobs, SCHEDULED, INITIALIZING,
RUNNING, hold at once), and a queue's caps per user inside it (#37: Slurm's MaxJobsPerUser and
MaxTRESPerUser on a QOS: the admitted jobs, and the systems they hold, of one user in that
queue).

A job whose admission would take its user over a cap stays queued saying which, and is
stepped over: it is never its queue's head, holds nothing back, and the jobs behind it, of
other users, go on (as Slurm's scheduler skips a job pending for QOSMaxCpuPerUserLimit or
QOSMaxJobsPerUserLimit). Pure: the pass is given what each user holds when it starts (the
store's counts of the holding jobs) and the caps; what it admits counts at once, so one pass
never takes a user over a cap.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from appliance.domain.backlog import QueuedJob
from appliance.domain.reasons import Reason, ReasonCode, said

CapOf = Callable[[str, tuple[str, ...]], int | None]


@dataclasses.dataclass(frozen=True)
class QueueUserCaps:
    """A queue's caps per user (None: none): admitted jobs, and the systems they hold."""

    running_jobs: int | None = None
    systems: int | None = None


@dataclasses.dataclass
class Holding:
    """What one user's admitted jobs of one queue hold: jobs, and CS-2 systems."""

    jobs: int = 0
    systems: int = 0


class UserCaps:
    """What each user holds and may hold, through one pass. `held`: the systems each user's
    admitted jobs hold as the pass starts; `cap_of(user, groups)`: their cluster-wide cap
    (None: none; `cap_of` None: nobody has one); `queue_caps`: the queues with caps per user;
    `in_queues`: what each (queue, user) holds of those queues as the pass starts."""

    def __init__(
        self,
        held: Mapping[str, int],
        cap_of: CapOf | None,
        queue_caps: Mapping[str, QueueUserCaps] | None = None,
        in_queues: Mapping[tuple[str, str], Holding] | None = None,
    ) -> None:
        self._held = dict(held)
        self._cap_of = cap_of
        self._caps: dict[tuple[str, tuple[str, ...]], int | None] = {}
        self._queue_caps = queue_caps or {}
        self._in_queues = {key: dataclasses.replace(h) for key, h in (in_queues or {}).items()}

    def refusal(self, job: QueuedJob, systems: int) -> Reason | None:
        """Why `job`, needing `systems`, may not start now for a cap of its user (None: it
        may): the cluster's cap first, then its queue's."""
        if self._cap_of is not None:
            key = (job.user, job.groups)
            if key not in self._caps:
                self._caps[key] = self._cap_of(job.user, job.groups)
            cap = self._caps[key]
            held = self._held.get(job.user, 0)
            if cap is not None and held + systems > cap:
                return said(
                    ReasonCode.USER_SYSTEMS, user=job.user, held=held, cap=cap, systems=systems
                )
        caps = self._queue_caps.get(job.queue)
        if caps is None:
            return None
        holding = self._in_queues.get((job.queue, job.user)) or Holding()
        if caps.running_jobs is not None and holding.jobs + 1 > caps.running_jobs:
            return said(
                ReasonCode.QUEUE_USER_JOBS, user=job.user, queue=job.queue,
                running=holding.jobs, cap=caps.running_jobs,
            )  # fmt: skip
        if caps.systems is not None and holding.systems + systems > caps.systems:
            return said(
                ReasonCode.QUEUE_USER_SYSTEMS, user=job.user, queue=job.queue,
                held=holding.systems, cap=caps.systems, systems=systems,
            )  # fmt: skip
        return None

    def take(self, job: QueuedJob, systems: int) -> None:
        """`job` was admitted: it counts for its user in the rest of the pass."""
        self._held[job.user] = self._held.get(job.user, 0) + systems
        if job.queue in self._queue_caps:
            holding = self._in_queues.setdefault((job.queue, job.user), Holding())
            holding.jobs += 1
            holding.systems += systems
