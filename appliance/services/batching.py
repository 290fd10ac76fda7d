"""Submits group-committed: jobs submitted concurrently are persisted in one transaction
(services/group_commit.py says how)."""

from __future__ import annotations

from appliance.domain.job import Job
from appliance.services.context import Context
from appliance.services.group_commit import GroupCommit
from appliance.store.jobs import NewJob


class SubmitBatcher:
    """Jobs submitted concurrently are persisted in one transaction (JobStore.create_jobs)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._commit = GroupCommit[NewJob, Job](self._create)

    async def write(self, new: NewJob) -> Job:
        return await self._commit.write(new)

    async def _create(self, batch: list[NewJob]) -> list[Job]:
        return await self.ctx.db(self.ctx.store.create_jobs, batch, self.ctx.clock())
