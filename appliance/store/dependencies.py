"""Job dependencies in the store: what each queued job still waits for, and a job's
dependencies and dependents for its full view."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from sqlalchemy import select, text
from sqlalchemy.orm import Session, aliased

from appliance.domain.dependencies import Condition, Dependency, DependencyState
from appliance.domain.job import Job
from appliance.domain.phases import Phase
from appliance.store.base import StoreBase, in_chunks
from appliance.store.tables import JobDependencyRow, JobRow

# CROSS JOIN: SQLite's way to keep the dependencies as the outer loop.
_DEPENDENCIES_SQLITE = text(
    "SELECT d.job_id, d.depends_on, d.condition, o.phase FROM job_dependencies AS d "
    "CROSS JOIN jobs AS j ON j.id = d.job_id LEFT JOIN jobs AS o ON o.id = d.depends_on "
    f"WHERE j.phase = '{Phase.QUEUED.value}' ORDER BY d.job_id, d.depends_on"
)


class DependencyStore(StoreBase):
    """JobStore's part for job dependencies."""

    def dependency_states(self) -> list[DependencyState]:
        """Every dependency of every queued job, with the phase of the job it names.

        Read from the dependencies, not from the queue: a long queue with few dependencies
        costs little. (SQLite's planner, left alone, walks every queued job.)"""
        if self.engine.dialect.name == "sqlite":
            with self._sessions() as s:
                return [
                    DependencyState(
                        job_id, on, Condition(condition), Phase(phase) if phase else None
                    )
                    for job_id, on, condition, phase in s.execute(_DEPENDENCIES_SQLITE)
                ]
        other = aliased(JobRow)
        stmt = (
            select(
                JobDependencyRow.job_id, JobDependencyRow.depends_on,
                JobDependencyRow.condition, other.phase,
            )
            .join(JobRow, JobRow.id == JobDependencyRow.job_id)
            .join(other, other.id == JobDependencyRow.depends_on, isouter=True)
            .where(JobRow.phase == Phase.QUEUED.value)
            .order_by(JobDependencyRow.job_id, JobDependencyRow.depends_on)
        )  # fmt: skip
        with self._sessions() as s:
            return [
                DependencyState(job_id, on, Condition(condition), Phase(phase) if phase else None)
                for job_id, on, condition, phase in s.execute(stmt)
            ]

    def existing_jobs(self, job_ids: Sequence[str]) -> set[str]:
        """Those of the ids that name a job."""
        found: set[str] = set()
        with self._sessions() as s:
            for chunk in in_chunks(list(job_ids)):
                found.update(s.scalars(select(JobRow.id).where(JobRow.id.in_(chunk))))
        return found

    def _with_dependencies(self, s: Session, job: Job) -> Job:
        """The job with the jobs it depends on (and how) and the jobs that depend on it."""
        depends_on = tuple(
            Dependency(d.depends_on, Condition(d.condition))
            for d in s.scalars(
                select(JobDependencyRow)
                .where(JobDependencyRow.job_id == job.id)
                .order_by(JobDependencyRow.depends_on)
            )
        )
        dependents = tuple(
            s.scalars(
                select(JobDependencyRow.job_id)
                .where(JobDependencyRow.depends_on == job.id)
                .order_by(JobDependencyRow.job_id)
            )
        )
        if not depends_on and not dependents:
            return job
        spec = dataclasses.replace(job.spec, depends_on=depends_on)
        return dataclasses.replace(job, spec=spec, dependents=dependents)
