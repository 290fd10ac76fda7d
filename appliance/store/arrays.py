"""Reading arrays (domain/arrays.py): an array's tasks, and what admission needs of the arrays
that cap their tasks running at once. Both read the `ix_jobs_array` index, which holds arrays'
rows only; a task is created with its array in one transaction (store/jobs.py create_jobs)."""

from __future__ import annotations

from sqlalchemy import case, func, select

from appliance.domain.job import Job
from appliance.domain.phases import Phase
from appliance.store.base import StoreBase
from appliance.store.rows import SUMMARY, job_from_row
from appliance.store.tables import HOLDING_PHASES, JobRow

_ARRAY_ROWS = JobRow.array_id != ""


class ArrayStore(StoreBase):
    """JobStore's part for arrays."""

    def array_tasks(self, array_id: str) -> list[Job]:
        """The summaries of the array's tasks by index (none: no such array)."""
        stmt = (
            select(*SUMMARY)
            .where(_ARRAY_ROWS, JobRow.array_id == array_id)
            .order_by(JobRow.array_index)
        )
        with self._sessions() as s:
            return [job_from_row(r) for r in s.execute(stmt)]

    def array_caps(self) -> dict[str, tuple[int, int]]:
        """For each array with a cap and a task queued: its cap and how many of its tasks
        hold resources (SCHEDULED to RUNNING) now."""
        holding = func.sum(case((JobRow.phase.in_(HOLDING_PHASES), 1), else_=0))
        queued = func.sum(case((JobRow.phase == Phase.QUEUED.value, 1), else_=0))
        stmt = (
            select(JobRow.array_id, func.max(JobRow.array_cap), holding)
            .where(_ARRAY_ROWS, JobRow.array_cap > 0)
            .where(JobRow.phase.in_([*HOLDING_PHASES, Phase.QUEUED.value]))
            .group_by(JobRow.array_id)
            .having(queued > 0)
        )
        with self._sessions() as s:
            return {str(a): (int(cap), int(held or 0)) for a, cap, held in s.execute(stmt)}
