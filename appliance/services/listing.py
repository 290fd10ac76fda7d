"""The list use case, once for every door: a page (or every page) of job summaries, newest
first, each queued job with its queue position read fresh, and the next page token.

A door renders a summary into what it sends (REST: the Job; gRPC: the serialized message).
Renderings are cached under the summary's key (id, created, version): every write that changes
what a summary shows bumps the job's version (JobStore), so a cached rendering is never stale,
and listing a long history costs a key query instead of reading and rendering every summary.
Summaries are read and rendered on the store's reader threads, a chunk at a time, each one
rendered as it is read (so the event loop stays free, and a cold listing of 100,000 jobs
leaves no 100,000 objects for the collector to walk); `warm` renders a history ahead, which
the composition root starts once the coordinator serves, so the first listing after a start
finds it rendered.

A queued job's queue position and pending reason are the exception: they move when other jobs
enter, leave or overtake in the queue, without this job's version. So they are never part of
a rendering: they are read on every call from the queue in memory (services/queue_view.py)
and handed out beside the renderings.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Generic, TypeAlias, TypeVar

from appliance.domain.errors import InvalidSpec
from appliance.domain.job import Job
from appliance.domain.listing import DEFAULT_LIMIT, MAX_LIMIT, JobKey, JobQuery
from appliance.domain.phases import Phase
from appliance.services.context import Context
from appliance.store.base import in_chunks

T = TypeVar("T")

STREAM_PAGE = 20_000  # jobs read at a time by a stream that asked for no page size
MAX_STREAM_PAGE = 50_000
WARM_PAGE = 2_000  # keys read at a time by `warm`


# One listed job: the door's rendering of its summary, its fresh queue position (0 unless the
# job is queued) and why it waits as of the scheduler's last pass ("": as the rendering says).
# A plain tuple: a stream of 100,000 jobs must cost no per-job object.
Listed: TypeAlias = tuple[T, int, str]


class JobListing(Generic[T]):
    """Lists jobs for one door, caching at most `max_cached` of its renderings. `render` runs on
    the store's reader threads: it must be a pure function of the summary."""

    def __init__(self, ctx: Context, render: Callable[[Job], T], max_cached: int) -> None:
        self._ctx = ctx
        self._render = render
        self.max_cached = max_cached
        # (rendering, queued) by key, oldest first; a queued job's rendering has no position.
        self._cache: OrderedDict[JobKey, tuple[T, bool]] = OrderedDict()
        # What the calls reading and rendering summaries now will have rendered, by job id.
        self._rendering: dict[str, asyncio.Future[dict[str, tuple[T, bool]]]] = {}

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

    async def warm(self, query: JobQuery) -> int:
        """Render the summaries `query` lists, newest first, until the cache is full or every
        one is rendered; returns how many it rendered. A chunk at a time on the reader threads,
        so calls in the meantime are served between chunks (and what they render is not
        rendered again)."""
        page = dataclasses.replace(query, page_token="")
        rendered = 0
        while (room := self.max_cached - len(self._cache)) > 0:
            page = dataclasses.replace(page, limit=min(WARM_PAGE, room))
            keys, token = await self._ctx.read(self._ctx.store.list_job_keys, page)
            rendered += len(await self._rendered([k for k in keys if k not in self._cache]))
            if not token:
                break
            page = dataclasses.replace(page, page_token=token)
        return rendered

    async def _listed(self, keys: Sequence[JobKey]) -> list[Listed[T]]:
        # Looked up before anything is added: adding may evict entries of this very page.
        cached = [(key, self._cache.get(key)) for key in keys]
        missing = [key for key, hit in cached if hit is None]
        fresh = await self._rendered(missing) if missing else {}
        found: list[tuple[str, T, bool]] = []  # (job id, rendering, queued)
        for key, hit in cached:
            if hit is None:
                hit = fresh.get(key[0])
                if hit is None:
                    continue  # deleted between the two reads
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

    async def _rendered(self, keys: Sequence[JobKey]) -> dict[str, tuple[T, bool]]:
        """(rendering, queued) by job id of those of `keys` that still exist, as read now (a
        newer version than the key's, if the job changed since), each cached under the key
        it was read with. A job another call is rendering already is waited for, not read
        again: a listing and `warm` walking the same history share the work."""
        found: dict[str, tuple[T, bool]] = {}
        theirs: dict[int, asyncio.Future[dict[str, tuple[T, bool]]]] = {}
        waited: list[str] = []
        for chunk in in_chunks([key[0] for key in keys]):
            mine = []
            for job_id in chunk:
                other = self._rendering.get(job_id)
                if other is None:
                    mine.append(job_id)
                else:
                    theirs[id(other)] = other
                    waited.append(job_id)
            if mine:
                found.update(await self._render_chunk(mine))
        for other in theirs.values():
            found.update(await other)
        # What another call did not get (it failed, or was cancelled) is read here.
        left = [job_id for job_id in waited if job_id not in found]
        for chunk in in_chunks(left):
            found.update(await self._render_chunk(chunk))
        return found

    async def _render_chunk(self, job_ids: list[str]) -> dict[str, tuple[T, bool]]:
        done: asyncio.Future[dict[str, tuple[T, bool]]] = (
            asyncio.get_running_loop().create_future()
        )
        for job_id in job_ids:
            self._rendering[job_id] = done
        found: dict[str, tuple[T, bool]] = {}
        try:
            for key, hit in await self._ctx.read(self._read_rendered, job_ids):
                self._put(key, hit)
                found[key[0]] = hit
        finally:
            done.set_result(found)  # on failure too: whoever waits reads what is missing
            for job_id in job_ids:
                if self._rendering.get(job_id) is done:
                    del self._rendering[job_id]
        return found

    def _read_rendered(self, job_ids: Sequence[str]) -> list[tuple[JobKey, tuple[T, bool]]]:
        """On a reader thread: each summary rendered as it is read."""
        render, queued = self._render, Phase.QUEUED
        return [
            (key, (render(job), job.phase is queued))
            for key, job in self._ctx.store.keyed_summaries(job_ids)
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
