"""The per-user cap of running systems in admission (Slurm's MaxTRESPerUser, #36): the CS-2
systems one user's admitted jobs (SCHEDULED, INITIALIZING, RUNNING) hold at once.

A job whose admission would take its user over their cap stays queued saying so, and is
stepped over: it is never its queue's head, holds nothing back, and the jobs behind it, of
other users, go on (as Slurm's scheduler skips a job pending for QOSMaxCpuPerUserLimit).
Pure: the pass is given what each user holds when it starts (the store's count of the
holding jobs' systems) and a user's cap from the limits policy; what it admits counts at
once, so one pass never takes a user over their cap.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from appliance.domain.backlog import QueuedJob
from appliance.domain.reasons import Reason, ReasonCode, said

CapOf = Callable[[str, tuple[str, ...]], int | None]


class UserCaps:
    """What each user holds and may hold, through one pass. `held`: the systems each user's
    admitted jobs hold as the pass starts; `cap_of(user, groups)`: their cap (None: none)."""

    def __init__(self, held: Mapping[str, int], cap_of: CapOf) -> None:
        self._held = dict(held)
        self._cap_of = cap_of
        self._caps: dict[tuple[str, tuple[str, ...]], int | None] = {}

    def refusal(self, job: QueuedJob, systems: int) -> Reason | None:
        """Why `job`, needing `systems`, may not start now for its user's cap (None: it may)."""
        key = (job.user, job.groups)
        if key not in self._caps:
            self._caps[key] = self._cap_of(job.user, job.groups)
        cap = self._caps[key]
        held = self._held.get(job.user, 0)
        if cap is None or held + systems <= cap:
            return None
        return said(ReasonCode.USER_SYSTEMS, user=job.user, held=held, cap=cap, systems=systems)

    def take(self, job: QueuedJob, systems: int) -> None:
        """`job` was admitted: its systems count for its user in the rest of the pass."""
        self._held[job.user] = self._held.get(job.user, 0) + systems
