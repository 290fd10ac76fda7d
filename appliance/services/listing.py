"""The list use case, once for every door: a page (or every page) of job summaries, newest
first, each queued job with its queue position read fresh, and the next page token.

A door renders a summary into what it sends (REST: the Job; gRPC: the serialized message).
Renderings are cached under the summary's key (id, created, version): every write that changes
what a summary shows bumps the job's version (JobStore), so a cached rendering is never stale,
and listing a long history costs a key query instead of reading and rendering every summary.
Summaries are read and rendered on the store's reader threads, a chunk at a time, each one
rendered as it is read (so the event loop stays free, and a cold listing of 100,000 jobs
leaves no 100,000 objects for the collector to walk); `warm` renders a history ahead, which
the composition root starts once the coordinator serves (`render_ahead`), so the first listing
after a start finds it rendered. Listings go first: `warm` waits between chunks while any
runs (the two would share one reader thread and one event loop), then finds what the listing
read cached.

A door may keep its renderings in the store across restarts (services/kept_renderings.py): a
rendering is then read from the store instead of rendered when the store holds it for the
very version listed, made by the very code that renders now (store/listing.py), so a restarted
coordinator reads its history's renderings instead of rendering them again. Only renderings
of queued and ended jobs are kept (a job holding systems changes with every progress report),
by `warm`: at start, then every RENDER_AHEAD_EVERY seconds for what changed meanwhile.

A queued job's queue position and pending reason are the exception: they move when other jobs
enter, leave or overtake in the queue, without this job's version. So they are never part of
a rendering: they are read on every call from the queue in memory (services/backlog_view.py)
and handed out beside the renderings. A filter on reason codes matches a queued job on that
fresh reason too (`_waiting`), and every other job on its row, in the store's query.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Generic, TypeAlias, TypeVar

from appliance.domain.errors import InvalidSpec, Unavailable
from appliance.domain.job import Job
from appliance.domain.listing import DEFAULT_LIMIT, MAX_LIMIT, JobKey, JobQuery
from appliance.domain.phases import TERMINAL, Phase
from appliance.domain.reasons import Reason
from appliance.services.context import Context
from appliance.services.kept_renderings import Keeping

T = TypeVar("T")

log = logging.getLogger(__name__)

STREAM_PAGE = 20_000  # jobs read at a time by a stream that asked for no page size
MAX_STREAM_PAGE = 50_000
WARM_PAGE = STREAM_PAGE  # keys read at a time by `warm`
CHUNK = 500  # summaries read (and rendered) in one call on a reader thread
KEEP_BATCH = 1_000  # renderings kept in one transaction: a short turn of the writer thread
RENDER_AHEAD_EVERY = 300.0  # seconds between two passes of `render_ahead` after the first
# Whose renderings are kept: a queued job changes only when someone changes it (its position
# and pending reason are no part of a rendering), an ended one hardly ever.
_KEPT_PHASES = TERMINAL | {Phase.QUEUED}


# One listed job: the door's rendering of its summary, its fresh queue position (0 unless the
# job is queued), why it waits as of the scheduler's last pass (None: as the rendering says)
# and when it is estimated to start (0.0: no estimate; services/start_estimates.py).
# A plain tuple: a stream of 100,000 jobs must cost no per-job object.
Listed: TypeAlias = tuple[T, int, Reason | None, float]

# What the cache holds of a key: the rendering, and whether the job is queued (its rendering
# has no position).
_Entry: TypeAlias = tuple[T, bool]


@dataclasses.dataclass
class Warmed:
    """Summaries rendered, renderings read as kept in the store, and renderings kept there
    (while a pass of `warm` ran: by it, and by listings meanwhile)."""

    rendered: int = 0
    loaded: int = 0
    kept: int = 0


class JobListing(Generic[T]):
    """Lists jobs for one door, caching at most `max_cached` of its renderings, and keeping
    them in the store as `keeping` says (None: never). `render` runs on the store's reader
    threads: it must be a pure function of the summary."""

    def __init__(
        self,
        ctx: Context,
        render: Callable[[Job], T],
        max_cached: int,
        keeping: Keeping[T] | None = None,
    ) -> None:
        self._ctx = ctx
        self._render = render
        self.max_cached = max_cached
        self._keeping = keeping
        self._cache: OrderedDict[JobKey, _Entry[T]] = OrderedDict()  # oldest first
        # Cached renderings still to keep in the store (rendered here, of queued or ended jobs).
        self._unkept: set[JobKey] = set()
        # What the calls reading and rendering summaries now will have read, by job id.
        self._rendering: dict[str, asyncio.Future[dict[str, _Entry[T]]]] = {}
        self._listings = 0  # listing calls under way
        self._no_listing = asyncio.Event()
        self._no_listing.set()
        self.totals = Warmed()  # by every call since the start

    def __len__(self) -> int:
        return len(self._cache)

    async def page(self, query: JobQuery) -> tuple[list[Listed[T]], str]:
        """One page of `query` and the token of the next page ("" at the end)."""
        check_query(query)
        query = await self._waiting(query)
        with self._listing():
            keys, token = await self._ctx.read(self._ctx.store.list_job_keys, query)
            return await self._listed(keys), token

    async def pages(self, query: JobQuery) -> AsyncIterator[list[Listed[T]]]:
        """Every page of `query`, from its page token on (pages of `query.limit` jobs, or
        STREAM_PAGE when it asks for none)."""
        check_query(query, MAX_STREAM_PAGE, STREAM_PAGE)
        page = dataclasses.replace(query, limit=query.limit or STREAM_PAGE)
        while True:
            page = await self._waiting(page)
            with self._listing():  # not while the caller has a page: it may be slow
                keys, token = await self._ctx.read(self._ctx.store.list_job_keys, page)
                listed = await self._listed(keys) if keys else []
            if listed:
                yield listed
            if not token:
                return
            page = dataclasses.replace(page, page_token=token)

    async def warm(self, query: JobQuery) -> Warmed:
        """Render the summaries `query` lists, newest first, up to `max_cached` of them, and
        keep in the store the renderings to keep (listings' since the last pass too). A chunk
        at a time on the reader threads, after any listing under way, so listings are served
        between chunks (and what they render is not rendered again)."""
        before = dataclasses.replace(self.totals)
        page = dataclasses.replace(query, page_token="")
        walked = 0
        while walked < self.max_cached:
            page = dataclasses.replace(page, limit=min(WARM_PAGE, self.max_cached - walked))
            await self._no_listing.wait()
            keys, token = await self._ctx.read(self._ctx.store.list_job_keys, page)
            walked += len(keys)
            await self._rendered([k for k in keys if k not in self._cache], polite=True)
            await self._keep()
            if not token:
                break
            page = dataclasses.replace(page, page_token=token)
        now = self.totals
        return Warmed(
            now.rendered - before.rendered, now.loaded - before.loaded, now.kept - before.kept
        )

    async def render_ahead(self, query: JobQuery, every: float = RENDER_AHEAD_EVERY) -> None:
        """`warm` now, so the first listing after a start finds the history rendered, then
        every `every` seconds, so what changed meanwhile is kept for the next start. Runs
        until cancelled."""
        first = True
        while True:
            started = time.monotonic()
            try:
                warmed = await self.warm(query)
            except Unavailable as exc:
                log.warning("job summaries not rendered ahead: %s", exc.message)
            except Exception:  # a fault of ours: logged, and the next pass tries again
                log.exception("job summaries not rendered ahead")
            else:
                # Worth a line at start-up only when there was a history to render: on a new
                # store "rendered 0" is noise on a newcomer's first screen.
                log.log(
                    logging.INFO if first and warmed.rendered + warmed.loaded else logging.DEBUG,
                    "rendered %d job summaries ahead of the first listing in %.1f s "
                    "(%d more read as kept in the store; %d kept)",
                    warmed.rendered, time.monotonic() - started, warmed.loaded, warmed.kept,
                )  # fmt: skip
            first = False
            await asyncio.sleep(every)

    async def _waiting(self, query: JobQuery) -> JobQuery:
        """`query`, filtering on reason codes, with the queued jobs that wait for one of them
        as of the scheduler's last pass: a queued job's reason is read fresh from the queue
        in memory, as every door shows it, not from its row (which says why it waited when
        it entered the queue). The store matches the rows of the jobs the pass did not decide
        on, and of every other job."""
        if not query.reasons:
            return query
        matched, undecided = await self._ctx.backlog.waiting_for(query.reasons)
        return dataclasses.replace(
            query, waiting=frozenset(matched), undecided=frozenset(undecided)
        )

    @contextlib.contextmanager
    def _listing(self) -> Iterator[None]:
        self._listings += 1
        self._no_listing.clear()
        try:
            yield
        finally:
            self._listings -= 1
            if not self._listings:
                self._no_listing.set()

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
            return [(rendering, 0, None, 0.0) for _, rendering, _ in found]
        view = self._ctx.backlog
        where = await view.positions(queued)
        starts = await self._ctx.estimates.of(queued)
        return [
            (rendering, where.get(job_id, 0), view.reason(job_id) if is_queued else None,
             starts.get(job_id, 0.0))
            for job_id, rendering, is_queued in found
        ]  # fmt: skip

    async def _rendered(
        self, keys: Sequence[JobKey], polite: bool = False
    ) -> dict[str, _Entry[T]]:
        """Entries by job id of those of `keys` that still exist: as kept in the store for
        the key, or read now (a newer version than the key's, if the job changed since) and
        rendered; each cached under the key it was read with. A job another call is reading
        already is waited for, not read again: a listing and `warm` walking the same history
        share the work. `polite`: each chunk after any listing under way."""
        found: dict[str, _Entry[T]] = {}
        theirs: dict[int, asyncio.Future[dict[str, _Entry[T]]]] = {}
        waited: list[JobKey] = []
        for start in range(0, len(keys), CHUNK):
            if polite:
                await self._no_listing.wait()
            mine = []
            for key in keys[start : start + CHUNK]:
                other = self._rendering.get(key[0])
                if polite and (hit := self._cache.get(key)) is not None:
                    found[key[0]] = hit  # a listing read it while this call waited
                elif other is None:
                    mine.append(key)
                else:
                    theirs[id(other)] = other
                    waited.append(key)
            if mine:
                found.update(await self._read_chunk(mine))
        for other in theirs.values():
            found.update(await other)
        # What another call did not get (it failed, or was cancelled) is read here.
        left = [key for key in waited if key[0] not in found]
        for start in range(0, len(left), CHUNK):
            found.update(await self._read_chunk(left[start : start + CHUNK]))
        return found

    async def _read_chunk(self, keys: list[JobKey]) -> dict[str, _Entry[T]]:
        done: asyncio.Future[dict[str, _Entry[T]]] = asyncio.get_running_loop().create_future()
        for key in keys:
            self._rendering[key[0]] = done
        found: dict[str, _Entry[T]] = {}
        try:
            read, loaded, to_keep = await self._ctx.read(self._read_rendered, keys)
            for key, entry in read:
                self._put(key, entry)
                found[key[0]] = entry
            self._unkept.update(to_keep)
            self.totals.loaded += loaded
            self.totals.rendered += len(read) - loaded
        finally:
            done.set_result(found)  # on failure too: whoever waits reads what is missing
            for key in keys:
                if self._rendering.get(key[0]) is done:
                    del self._rendering[key[0]]
        return found

    def _read_rendered(
        self, keys: Sequence[JobKey]
    ) -> tuple[list[tuple[JobKey, _Entry[T]]], int, list[JobKey]]:
        """On a reader thread: the renderings kept for `keys`, then the other summaries, each
        rendered as it is read; how many were kept ones, and the keys of those to keep."""
        store, keeping, queued = self._ctx.store, self._keeping, Phase.QUEUED
        read: list[tuple[JobKey, _Entry[T]]] = []
        if keeping is not None:
            kept = store.kept_renderings(keys, keeping.form)
            load = keeping.load
            read = [(k, (load(kept[k[0]][0]), kept[k[0]][1])) for k in keys if k[0] in kept]
            keys = [key for key in keys if key[0] not in kept]
        loaded, to_keep = len(read), []
        render, kept_phases = self._render, _KEPT_PHASES if keeping is not None else frozenset()
        for key, job in store.keyed_summaries([key[0] for key in keys]):
            read.append((key, (render(job), job.phase is queued)))
            if job.phase in kept_phases:
                to_keep.append(key)
        return read, loaded, to_keep

    async def _keep(self) -> None:
        """Keep in the store the cached renderings still to keep, a batch a transaction on the
        writer thread after any listing under way (a rendering evicted meanwhile is rendered
        again when next listed)."""
        keeping = self._keeping
        if keeping is None:
            return
        todo = [(key, self._cache[key]) for key in self._unkept if key in self._cache]
        todo.sort(key=lambda item: (item[0][1], item[0][0]))  # in the table's order: appends
        self._unkept.clear()
        for start in range(0, len(todo), KEEP_BATCH):
            batch = todo[start : start + KEEP_BATCH]
            kept = [(key, keeping.dump(rendering), queued) for key, (rendering, queued) in batch]
            try:
                await self._no_listing.wait()  # the writer thread's turns wait for listings too
                await self._ctx.db(self._ctx.store.keep_renderings, kept, keeping.form)
            except BaseException:
                self._unkept.update(key for key, _ in todo[start:])  # for the next pass
                raise
            self.totals.kept += len(batch)

    def _put(self, key: JobKey, entry: _Entry[T]) -> None:
        self._cache[key] = entry
        if len(self._cache) > self.max_cached:
            self._unkept.discard(self._cache.popitem(last=False)[0])


def check_query(query: JobQuery, max_limit: int = MAX_LIMIT, default: int = DEFAULT_LIMIT) -> None:
    """The one check of a list query's page size (0: the default)."""
    if not 0 <= query.limit <= max_limit:
        raise InvalidSpec(
            f"limit must be between 1 and {max_limit} (or 0 for the default, {default})",
            field="limit",
        )
