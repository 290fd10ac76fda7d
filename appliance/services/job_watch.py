"""Watching every job a list query matches (`csctl get jobs -w`, like `kubectl get -w`).

A door subscribes first (`JobWatch.watching`), lists the query's jobs, then sends the changes
the subscription collected meanwhile and after: so no change made after the listing began is
lost (one made while it ran may be sent although the listing already showed it). A change
comes from the bus (JobBus.every_job): a phase event, a submit, a new priority or labels. The
changed jobs are read again, a batch at a time, and matched against the query here: the same
filters the store's query applies (domain/selectors.py matches a label selector as SQL does).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
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
            found = {
                job.id: job
                for job in await self.ctx.read(self.ctx.store.job_summaries, list(taken))
            }
            if any(job.phase is Phase.QUEUED for job in found.values()):
                await self.ctx.backlog.current()  # positions as of every change so far
            jobs = [
                shown
                for job_id, ended in taken.items()
                if (job := found.get(job_id)) is not None
                and query_matches(query, shown := self.ctx.backlog.shown(job), ended=ended)
            ]
            jobs = [await self.ctx.estimates.shown(job) for job in jobs]
            if jobs:
                yield jobs
