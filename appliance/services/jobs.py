"""Job use cases: submit, read, list, cancel, events, watch."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

from appliance.domain.errors import InvalidSpec
from appliance.domain.ids import is_job_id, new_job_id
from appliance.domain.job import Job, JobEvent
from appliance.domain.phases import Phase
from appliance.domain.plan import plan_replicas
from appliance.domain.spec import JobSpec, validate_user
from appliance.services.context import Context
from appliance.store.jobs import JobQuery

STREAM_PAGE = 1000


class JobService:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def submit(self, spec: JobSpec, user: str) -> Job:
        """Plan against the pool (rejecting what can never fit), persist QUEUED, wake the queue."""
        validate_user(user)
        pool = await self.ctx.db(self.ctx.store.pool)
        plan = plan_replicas(spec, pool)
        job_id = new_job_id()
        if not spec.model_dir:
            spec = _with_model_dir(spec, self.ctx.settings.data_dir / "model_dirs" / job_id)
        job = await self.ctx.db(
            self.ctx.store.create_job, job_id, user, spec, plan, self.ctx.clock()
        )
        self.ctx.bus.wake_scheduler()
        return job

    async def get(self, job_id: str) -> Job:
        _check_id(job_id)
        return await self.ctx.db(self.ctx.store.get_job, job_id)

    async def list_jobs(self, query: JobQuery) -> tuple[list[Job], str]:
        if query.limit < 0:
            raise InvalidSpec("limit must not be negative", field="limit")
        return await self.ctx.db(self.ctx.store.list_jobs, query)

    async def stream(self, query: JobQuery) -> AsyncIterator[list[Job]]:
        """Every matching job in pages, newest first."""
        page = dataclasses.replace(query, limit=query.limit or STREAM_PAGE)
        while True:
            jobs, token = await self.list_jobs(page)
            if jobs:
                yield jobs
            if not token:
                return
            page = dataclasses.replace(page, page_token=token)

    async def cancel(self, job_id: str, reason: str = "") -> tuple[Job, bool, str]:
        """Cancel a job; cancelling a terminal job changes nothing and says so."""
        _check_id(job_id)
        why = reason.strip()[:1024] or "cancelled by user"
        while True:
            job = await self.ctx.db(self.ctx.store.get_job, job_id, with_replicas=False)
            if job.phase.terminal:
                if job.phase is Phase.CANCELLED:
                    return job, False, f"job {job_id} was already cancelled"
                return job, False, f"job {job_id} already {job.phase.value}; nothing to cancel"
            change = await self.ctx.set_phase(job_id, Phase.CANCELLED, why, expected=job.phase)
            if change.applied:
                job = await self.ctx.db(self.ctx.store.get_job, job_id)
                return job, True, f"job {job_id} cancelled"
            # The job moved on between our read and our write: decide again on its new phase.

    async def events(self, job_id: str) -> list[JobEvent]:
        _check_id(job_id)
        return await self.ctx.db(self.ctx.store.events, job_id)

    async def watch(self, job_id: str, after_seq: int = 0) -> AsyncIterator[JobEvent]:
        """Recorded events after `after_seq`, then live ones, until the job is terminal."""
        _check_id(job_id)
        with self.ctx.bus.subscribe(job_id) as live:
            recorded = await self.ctx.db(self.ctx.store.events, job_id, after_seq)
            last_seq = after_seq
            for event in recorded:
                last_seq = event.seq
                yield event
                if event.to_phase is not None and event.to_phase.terminal:
                    return
            while True:
                event = await live.get()
                if event.progress is None:
                    if event.seq <= last_seq:
                        continue  # already replayed from the store
                    last_seq = event.seq
                yield event
                if event.to_phase is not None and event.to_phase.terminal:
                    return


def _check_id(job_id: str) -> None:
    if not is_job_id(job_id):
        raise InvalidSpec(
            f"{job_id!r} is not a job id; job ids look like wsjob-0a1b2c3d4e5f6g", field="job_id"
        )


def _with_model_dir(spec: JobSpec, path: Path) -> JobSpec:
    return dataclasses.replace(spec, model_dir=str(path.resolve()))
