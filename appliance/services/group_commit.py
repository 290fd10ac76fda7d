"""Group commit: requests that arrive together are written in one transaction (or read in one
trip).

Each caller still gets its own answer. A batch that fails as a whole (the database is locked or
gone) is tried again one request at a time, so one bad request fails only its own caller and
nothing is half-written. Used for phase changes (services/context.py), submits
(services/batching.py), cancels (services/cancels.py), replica writes and the reads of the
jobs' states that replicas wait on (services/replicas.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from appliance.domain.errors import Unavailable

log = logging.getLogger(__name__)

MAX_BATCH = 256

Request = TypeVar("Request")
Answer = TypeVar("Answer")


class GroupCommit(Generic[Request, Answer]):
    """Collects requests while a batch is being written and writes them as the next batch.

    `write_batch` answers a batch in request order, each answer either a value or the
    exception that request alone fails with.
    """

    def __init__(
        self,
        write_batch: Callable[[list[Request]], Awaitable[Sequence[Answer | Exception]]],
        max_batch: int = MAX_BATCH,
    ) -> None:
        self._write_batch = write_batch
        self._max_batch = max_batch
        self._pending: list[tuple[Request, asyncio.Future[Answer]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def write(self, request: Request) -> Answer:
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self._pending:
                size = self._max_batch
                batch, self._pending = self._pending[:size], self._pending[size:]
                await self._write(batch)
        finally:
            self._writer = None
            for _, future in self._pending:  # only left behind when the writer is cancelled
                if not future.done():
                    future.set_exception(Unavailable("the coordinator is stopping; try again"))
            self._pending = []

    async def _write(self, batch: list[tuple[Request, asyncio.Future[Answer]]]) -> None:
        try:
            answers = await self._write_batch([request for request, _ in batch])
        except Exception as exc:
            if len(batch) > 1:
                # Not expected but from a database away for a moment: each alone is slower.
                log.warning("a batch of %d failed (%r); writing each alone", len(batch), exc)
                for item in batch:
                    await self._write([item])
            elif not batch[0][1].done():
                batch[0][1].set_exception(exc)
            return
        for (_, future), answer in zip(batch, answers, strict=True):
            if future.done():
                continue
            if isinstance(answer, Exception):
                future.set_exception(answer)
            else:
                future.set_result(answer)
