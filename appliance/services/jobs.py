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
from appliance.services.batching import SubmitBatcher
from appliance.services.context import Context
from appliance.store.jobs import MAX_LIMIT, JobKey, JobQuery, NewJob

STREAM_PAGE = 20_000


class JobService:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._batcher = SubmitBatcher(ctx)

    async def submit(self, spec: JobSpec, user: str) -> Job:
        """Plan against the pool (rejecting what can never fit), persist QUEUED, wake the queue."""
        validate_user(user)
        pool = await self.ctx.db(self.ctx.store.pool)
        plan = plan_replicas(spec, pool)
        job_id = new_job_id()
        if not spec.model_dir:
            spec = _with_model_dir(spec, self.ctx.settings.data_dir / "model_dirs" / job_id)
        job = await self._batcher.write(NewJob(job_id, user, spec, plan))
        self.ctx.bus.wake_scheduler()
        return job

    async def get(self, job_id: str) -> Job:
        _check_id(job_id)
        return await self.ctx.db(self.ctx.store.get_job, job_id)

    async def list_keys(self, query: JobQuery) -> tuple[list[JobKey], str]:
        """One page of summary keys (see JobStore.list_job_keys), at most MAX_LIMIT."""
        if query.limit < 0 or query.limit > MAX_LIMIT:
            raise InvalidSpec(f"limit must be between 0 and {MAX_LIMIT}", field="limit")
        return await self.ctx.db(self.ctx.store.list_job_keys, query)

    async def stream_keys(self, query: JobQuery) -> AsyncIterator[list[JobKey]]:
        """Keys of every matching job in pages, newest first (see JobStore.list_job_keys)."""
        page = dataclasses.replace(query, limit=query.limit or STREAM_PAGE)
        while True:
            keys, token = await self.ctx.db(self.ctx.store.list_job_keys, page)
            if keys:
                yield keys
            if not token:
                return
            page = dataclasses.replace(page, page_token=token)

    async def summaries(self, job_ids: list[str]) -> list[Job]:
        return await self.ctx.db(self.ctx.store.job_summaries, job_ids)

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
