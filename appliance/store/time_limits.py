"""Time limits in the store: the running jobs whose limit is reached, and their end in TIMEOUT.

A job's limit (`jobs.time_limit`, seconds) and the seconds its ended attempts ran
(`jobs.ran_seconds`, added by the phase writer when an attempt leaves RUNNING) say when its
current attempt's limit ends: started_at + time_limit - ran_seconds. Time queued, or preempted
and queued again, never counts. The loops ask such a job for a checkpoint through the requeue
request (store/requeues.py), then end it here instead of queueing it again.
"""

from __future__ import annotations

import dataclasses

from sqlalchemy import select

from appliance.domain.backlog import Release
from appliance.domain.errors import NotFound
from appliance.domain.phase_moves import PhaseChange
from appliance.domain.phases import Phase
from appliance.domain.reasons import Reason
from appliance.store.base import StoreBase
from appliance.store.requeues import end_stopping_attempt
from appliance.store.tables import HOLDING_PHASES, JobRow, PlacementRow

_OVER_LIMIT = select(
    JobRow.id, JobRow.attempt, JobRow.time_limit, JobRow.spec["model_dir"].as_string()
).where(
    JobRow.phase == Phase.RUNNING.value,
    JobRow.time_limit > 0,
    JobRow.stop_reason == "",
    JobRow.started_at > 0,
)


_HOLDING = select(
    JobRow.id, JobRow.phase, JobRow.systems, JobRow.time_limit, JobRow.ran_seconds,
    JobRow.started_at,
).where(JobRow.phase.in_(HOLDING_PHASES))  # fmt: skip
_HOLDINGS = select(PlacementRow.job_id, PlacementRow.node, PlacementRow.amount)


@dataclasses.dataclass(frozen=True)
class OverLimit:
    """A running job whose time limit is reached."""

    job_id: str
    attempt: int
    limit: int  # seconds
    checkpointable: bool  # it has a model dir its chief writes checkpoints to


class TimeLimitStore(StoreBase):
    """JobStore's part for time limits."""

    def over_time_limit(self, now: float) -> list[OverLimit]:
        """Running jobs, not already stopping, whose running time (this attempt's and the
        ended ones') has reached their time limit."""
        stmt = _OVER_LIMIT.where(JobRow.started_at + JobRow.time_limit - JobRow.ran_seconds <= now)
        with self._sessions() as s:
            return [OverLimit(r.id, r.attempt, r.time_limit, bool(r[3])) for r in s.execute(stmt)]

    def releases(self, now: float) -> list[Release]:
        """When each job holding systems gives back what it holds by its time limit (a job
        not yet RUNNING: as if it started now; one without a limit: unknown). What they hold
        is read only when one of them has a limit."""
        with self._sessions() as s:
            rows = s.execute(_HOLDING).all()
            holdings: dict[str, list[tuple[str, int]]] = {}
            if any(row.time_limit for row in rows):
                for job_id, node, amount in s.execute(_HOLDINGS):
                    holdings.setdefault(job_id, []).append((node, int(amount)))
        releases = []
        for job_id, phase, systems, limit, ran, started in rows:
            count = systems.count(",") + 1 if systems else 0
            if not count:
                continue
            begun = started if phase == Phase.RUNNING.value and started > 0 else now
            ends = begun + limit - ran if limit else None
            releases.append(Release(count, ends, tuple(holdings.get(job_id, ()))))
        return releases

    def time_out_now(
        self, job_id: str, attempt: int, reason: Reason, now: float
    ) -> list[PhaseChange | NotFound]:
        """End `attempt` of the job in TIMEOUT with `reason`, only while that attempt still
        holds resources with a stop asked for (so a late task never ends the next attempt);
        [] when it does not. One transaction with the phase writer's."""
        return end_stopping_attempt(self, job_id, attempt, Phase.TIMEOUT, reason, now)
