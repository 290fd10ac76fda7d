"""Watching every job a list query matches (`csctl get jobs -w`, like `kubectl get -w`).

A door subscribes first (`JobWatch.watching`), lists the query's jobs, then sends the changes
the subscription collected meanwhile and after: so no change made after the listing began is
lost (one made while it ran may be sent although the listing already showed it). A change
comes from the bus (JobBus.every_job): a phase event, a submit, a new priority or labels. The
changed jobs are read again, a batch at a time, and matched against the query here: the same
filters the store's query applies (domain/selectors.py matches a label selector as SQL does).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager

from appliance.domain.job import Job
from appliance.domain.listing import JobQuery
from appliance.domain.phases import Phase
from appliance.services.bus import ChangedJobs
from appliance.services.context import Context


def query_matches(query: JobQuery, job: Job, *, ended: bool = False) -> bool:
    """Whether `query` lists `job`; `ended`: the change was the job's end, which a query of
    active jobs shows once (the job leaves the list in its final phase)."""
    if query.phases:
        if job.phase not in query.phases:
            return False
    elif job.phase.terminal and not (query.include_terminal or ended or query.reasons):
        return False
    if query.user and job.user != query.user:
        return False
    if query.array and (job.array is None or job.array.array_id != query.array):
        return False
    if query.reasons and not {job.reason_code, job.pending_reason_code} & query.reasons:
        return False  # (a queued job: as shown, its reason read fresh from the queue)
    labels = job.spec.labels
    if any(labels.get(key) != value for key, value in query.labels.items()):
        return False
    return query.selector.matches(labels)


class JobWatch:
    """The changes of the jobs of a list query."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._reads = SharedReads(self._shown)

    @contextmanager
    def watching(self, query: JobQuery) -> Iterator[AsyncIterator[list[Job]]]:
        """Subscribe now; iterate the result (after listing) for batches of changed jobs that
        `query` matches, as every door shows them (queue position, pending reason, estimated
        start)."""
        with self.ctx.bus.every_job() as changed:
            yield self._changes(query, changed)

    async def _changes(self, query: JobQuery, changed: ChangedJobs) -> AsyncIterator[list[Job]]:
        while True:
            await changed.ready.wait()
            taken = changed.take()
            found = await self._reads.jobs(taken)
            jobs = [
                job
                for job_id, ended in taken.items()
                if (job := found.get(job_id)) is not None
                and query_matches(query, job, ended=ended)
            ]
            if jobs:
                yield jobs

    async def _shown(self, ids: list[str]) -> dict[str, Job]:
        """The jobs `ids` as the doors show them, read once for every watcher."""
        found = await self.ctx.read(self.ctx.store.job_summaries, ids)
        if any(job.phase is Phase.QUEUED for job in found):
            await self.ctx.backlog.current()  # positions as of every change so far
        shown = [await self.ctx.estimates.shown(self.ctx.backlog.shown(job)) for job in found]
        return {job.id: job for job in shown}


class SharedReads:
    """One read for every watcher that wakes on the same changes (as Kubernetes' watch cache
    serves every watcher from one copy): with 128 streams open, a change costs one store read,
    not 128.

    A watcher joins the read that has not started yet, and a read starts only after the loop
    has run every watcher woken with it, so it sees every change they were told of; a watcher
    that comes after a read started waits for the next one (never a read older than its
    change). A watcher cancelled while waiting leaves the read to the others.
    """

    def __init__(self, read: Callable[[list[str]], Awaitable[dict[str, Job]]]) -> None:
        self._read = read
        self._ids: dict[str, None] = {}  # the next read's, in order
        self._next: asyncio.Future[dict[str, Job]] | None = None
        self._reading: set[asyncio.Future[dict[str, Job]]] = set()

    async def jobs(self, ids: Iterable[str]) -> dict[str, Job]:
        """Job id -> job, for `ids` among others (a job that is gone is not in it)."""
        self._ids.update(dict.fromkeys(ids))
        if self._next is None:
            loop = asyncio.get_running_loop()
            self._next = loop.create_future()
            # In a context of its own: the shared read is no one user's (services/fair_reads.py).
            loop.call_soon(self._start, self._next, context=contextvars.Context())
        return await asyncio.shield(self._next)

    def _start(self, result: asyncio.Future[dict[str, Job]]) -> None:
        ids, self._ids, self._next = list(self._ids), {}, None
        task = asyncio.ensure_future(self._read(ids))
        self._reading.add(task)  # referenced until done (the loop keeps only weak ones)
        task.add_done_callback(self._reading.discard)
        task.add_done_callback(lambda done: _settle(result, done))


def _settle(result: asyncio.Future[dict[str, Job]], done: asyncio.Future[dict[str, Job]]) -> None:
    if result.cancelled():
        return
    if done.cancelled():
        result.cancel()
    elif (error := done.exception()) is not None:
        result.set_exception(error)
        result.exception()  # its waiters get it; if all were cancelled, no "never retrieved"
    else:
        result.set_result(done.result())
