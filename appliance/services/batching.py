"""Group commit of submits: jobs submitted concurrently are written in one transaction.

Each submit still gets its own answer; a batch that fails to write fails every submit in it and
stores none of them (one transaction), so nothing is half-written.
"""

from __future__ import annotations

import asyncio

from appliance.domain.errors import Unavailable
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
                await self._write(batch)
        finally:
            self._writer = None
            for _, future in self._pending:  # only left behind when the writer is cancelled
                if not future.done():
                    future.set_exception(Unavailable("the coordinator is stopping; submit again"))
            self._pending = []

    async def _write(self, batch: list[tuple[NewJob, asyncio.Future[Job]]]) -> None:
        """One transaction for the batch; if it fails, each job alone, so one bad job fails only
        its own submit."""
        try:
            jobs = await self.ctx.db(
                self.ctx.store.create_jobs, [n for n, _ in batch], self.ctx.clock()
            )
        except Exception as exc:
            if len(batch) > 1:
                for item in batch:
                    await self._write([item])
            elif not batch[0][1].done():
                batch[0][1].set_exception(exc)
            return
        for (_, future), job in zip(batch, jobs, strict=True):
            if not future.done():
                future.set_result(job)
