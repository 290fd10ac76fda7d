"""The list use case, once for every door: a page (or every page) of job summaries, newest
first, each queued job with its queue position read fresh, and the next page token.

A door renders a summary into what it sends (REST: the Job; gRPC: the serialized message).
Renderings are cached under the summary's key (id, created, version): every write that changes
what a summary shows bumps the job's version (JobStore), so a cached rendering is never stale,
and listing a long history costs a key query instead of reading and rendering every summary.

A queued job's queue position and pending reason are the exception: they move when other jobs
enter, leave or overtake in the queue, without this job's version. So they are never part of
a rendering: they are read on every call from the queue in memory (services/queue_view.py)
and handed out beside the renderings.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Generic, TypeAlias, TypeVar

from appliance.domain.errors import InvalidSpec
from appliance.domain.job import Job
from appliance.domain.listing import DEFAULT_LIMIT, MAX_LIMIT, JobKey, JobQuery
from appliance.domain.phases import Phase
from appliance.services.context import Context

T = TypeVar("T")

STREAM_PAGE = 20_000  # jobs read at a time by a stream that asked for no page size
MAX_STREAM_PAGE = 50_000


# One listed job: the door's rendering of its summary, its fresh queue position (0 unless the
# job is queued) and why it waits as of the scheduler's last pass ("": as the rendering says).
# A plain tuple: a stream of 100,000 jobs must cost no per-job object.
Listed: TypeAlias = tuple[T, int, str]


class JobListing(Generic[T]):
    """Lists jobs for one door, caching at most `max_cached` of its renderings."""

    def __init__(self, ctx: Context, render: Callable[[Job], T], max_cached: int) -> None:
        self._ctx = ctx
        self._render = render
        self.max_cached = max_cached
        # (rendering, queued) by key, oldest first; a queued job's rendering has no position.
        self._cache: OrderedDict[JobKey, tuple[T, bool]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._cache)

    async def page(self, query: JobQuery) -> tuple[list[Listed[T]], str]:
        """One page of `query` and the token of the next page ("" at the end)."""
        check_query(query)
        keys, token = await self._ctx.read(self._ctx.store.list_job_keys, query)
        return await self._listed(keys), token

    async def pages(self, query: JobQuery) -> AsyncIterator[list[Listed[T]]]:
        """Every page of `query`, from its page token on (pages of `query.limit` jobs, or
        STREAM_PAGE when it asks for none)."""
        check_query(query, MAX_STREAM_PAGE, STREAM_PAGE)
        page = dataclasses.replace(query, limit=query.limit or STREAM_PAGE)
        while True:
            keys, token = await self._ctx.read(self._ctx.store.list_job_keys, page)
            if keys:
                yield await self._listed(keys)
            if not token:
                return
            page = dataclasses.replace(page, page_token=token)

    async def _listed(self, keys: Sequence[JobKey]) -> list[Listed[T]]:
        # Looked up before anything is added: adding may evict entries of this very page.
        cached = [(key, self._cache.get(key)) for key in keys]
        missing = [key[0] for key, hit in cached if hit is None]
        store = self._ctx.store
        fetched: dict[str, Job] = {}
        if missing:
            fetched = {job.id: job for job in await self._ctx.read(store.job_summaries, missing)}
        found: list[tuple[str, T, bool]] = []  # (job id, rendering, queued)
        for key, hit in cached:
            if hit is None:
                job = fetched.get(key[0])
                if job is None:
                    continue  # deleted between the two reads
                hit = (self._render(job), job.phase is Phase.QUEUED)
                self._put(key, hit)
            found.append((key[0], *hit))
        queued = [job_id for job_id, _, is_queued in found if is_queued]
        if not queued:
            return [(rendering, 0, "") for _, rendering, _ in found]
        view = self._ctx.queue
        where = await view.positions(queued)
        return [
            (rendering, where.get(job_id, 0), view.reason(job_id) or "" if is_queued else "")
            for job_id, rendering, is_queued in found
        ]

    def _put(self, key: JobKey, hit: tuple[T, bool]) -> None:
        self._cache[key] = hit
        if len(self._cache) > self.max_cached:
            self._cache.popitem(last=False)


def check_query(query: JobQuery, max_limit: int = MAX_LIMIT, default: int = DEFAULT_LIMIT) -> None:
    """The one check of a list query's page size (0: the default)."""
    if not 0 <= query.limit <= max_limit:
        raise InvalidSpec(
            f"limit must be between 1 and {max_limit} (or 0 for the default, {default})",
            field="limit",
        )
