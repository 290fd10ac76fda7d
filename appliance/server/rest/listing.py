"""List pages for REST: summary keys from JobService, then the summaries in key order, each
queued one with its queue position read fresh (as GetJob and ListJobs give it)."""

from __future__ import annotations

import dataclasses

from appliance.domain.job import Job
from appliance.domain.listing import JobKey, JobQuery
from appliance.domain.phases import Phase
from appliance.services.jobs import JobService


async def list_page(jobs: JobService, query: JobQuery) -> tuple[list[Job], str]:
    """One page of job summaries, newest first, and the token of the next page ("" = end)."""
    keys, token = await jobs.list_keys(query)
    return await _summaries(jobs, keys), token


async def _summaries(jobs: JobService, keys: list[JobKey]) -> list[Job]:
    if not keys:
        return []
    found = {job.id: job for job in await jobs.summaries([k[0] for k in keys])}
    queued = [job_id for job_id, job in found.items() if job.phase is Phase.QUEUED]
    where = await jobs.queue_positions(queued) if queued else {}
    return [
        dataclasses.replace(found[k[0]], queue_position=where[k[0]])
        if k[0] in where
        else found[k[0]]
        for k in keys
        if k[0] in found
    ]
