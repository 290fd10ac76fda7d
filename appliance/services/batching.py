"""Group commit of submits: jobs submitted concurrently are written in one transaction.

Each submit still gets its own answer; a batch that fails to write fails every submit in it and
stores none of them (one transaction), so nothing is half-written.
"""

from __future__ import annotations

import asyncio

from appliance.domain.job import Job
from appliance.services.context import Context
from appliance.store.jobs import NewJob

MAX_BATCH = 256


class SubmitBatcher:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._pending: list[tuple[NewJob, asyncio.Future[Job]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def write(self, new: NewJob) -> Job:
        future: asyncio.Future[Job] = asyncio.get_running_loop().create_future()
        self._pending.append((new, future))
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                try:
                    jobs = await self.ctx.db(
                        self.ctx.store.create_jobs, [n for n, _ in batch], self.ctx.clock()
                    )
                except Exception as exc:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (_, future), job in zip(batch, jobs, strict=True):
                    if not future.done():
                        future.set_result(job)
        finally:
            self._writer = None
