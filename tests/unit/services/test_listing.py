"""The list use case (services.listing.JobListing) over a real store: renderings cached under
each summary's version, queue positions read fresh on every call, pages and their tokens, and
the one check of the page size."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from appliance.domain.errors import InvalidSpec, Unavailable
from appliance.domain.job import Job
from appliance.domain.listing import MAX_LIMIT, JobKey, JobQuery
from appliance.domain.phases import Phase
from appliance.domain.spec import Priority
from appliance.loops.scheduling import SchedulerLoop
from appliance.services.context import Context
from appliance.services.kept_renderings import Keeping
from appliance.services.listing import MAX_STREAM_PAGE, JobListing, Listed
from tests.unit.harness import NOW, create, new_jobs

# Created in one batch: the same created_at, so newest first means the highest id first.
IDS = [f"wsjob-listing00000{i}" for i in range(5)]
NEWEST_FIRST = IDS[::-1]


class Renders:
    """A door's rendering: (id, phase, labels), counting the summaries it was given."""

    def __init__(self) -> None:
        self.rendered: list[str] = []

    def __call__(self, job: Job) -> tuple[str, Phase, dict[str, str]]:
        self.rendered.append(job.id)
        assert job.queue_position == 0  # a summary never carries a position
        return job.id, job.phase, dict(job.spec.labels)


@pytest.fixture
def render(ctx: Context) -> Renders:
    create(ctx, new_jobs(IDS), NOW)
    return Renders()


async def test_renderings_are_cached_while_positions_are_read_fresh(
    ctx: Context, render: Renders
) -> None:
    listing = JobListing(ctx, render, max_cached=100)
    first, token = await listing.page(JobQuery())
    assert token == ""
    assert [r[0][0] for r in first] == NEWEST_FIRST
    assert [r[1] for r in first] == [5, 4, 3, 2, 1]  # queue order: then by id

    await ctx.set_phase(IDS[0], Phase.CANCELLED, "cancelled")
    second, _ = await listing.page(JobQuery(include_terminal=True))
    # Every job behind the cancelled one moved up, though none of their versions changed.
    assert [r[1] for r in second] == [4, 3, 2, 1, 0]
    assert second[4][0][1] is Phase.CANCELLED
    # Only the cancelled job rendered again (a chunk renders in the order the store reads).
    assert sorted(render.rendered[: len(IDS)]) == IDS and render.rendered[len(IDS) :] == [IDS[0]]

    ctx.store.set_priority(IDS[4], Priority.P0, NOW + 1)  # the newest jumps the queue
    ctx.backlog.mark(IDS[4])  # as the priority door does
    third, _ = await listing.page(JobQuery(include_terminal=True))
    assert [r[1] for r in third] == [1, 4, 3, 2, 0]
    assert render.rendered[len(IDS) :] == [IDS[0], IDS[4]]


async def test_a_changed_summary_is_rendered_again(ctx: Context, render: Renders) -> None:
    listing = JobListing(ctx, render, max_cached=100)
    await listing.page(JobQuery())
    ctx.store.update_labels(IDS[2], {"team": "nlp"}, [], NOW + 1)
    listed, _ = await listing.page(JobQuery())
    assert {r[0][0]: r[0][2] for r in listed}[IDS[2]] == {"team": "nlp"}
    assert render.rendered[len(IDS) :] == [IDS[2]]


async def test_a_page_larger_than_the_cache_is_served_whole(ctx: Context, render: Renders) -> None:
    listing = JobListing(ctx, render, max_cached=2)
    for _ in range(2):
        listed, _ = await listing.page(JobQuery())
        assert [r[0][0] for r in listed] == NEWEST_FIRST
        assert [r[1] for r in listed] == [5, 4, 3, 2, 1]
    assert len(listing) == 2


async def test_pages_follow_their_tokens_and_a_stream_reads_them_all(
    ctx: Context, render: Renders
) -> None:
    listing = JobListing(ctx, render, max_cached=100)
    seen: list[str] = []
    token = ""
    while True:
        listed, token = await listing.page(JobQuery(limit=2, page_token=token))
        assert len(listed) <= 2
        seen += [r[0][0] for r in listed]
        if not token:
            break
    assert seen == NEWEST_FIRST
    streamed = [[r[0][0] for r in page] async for page in listing.pages(JobQuery(limit=2))]
    assert streamed == [NEWEST_FIRST[0:2], NEWEST_FIRST[2:4], NEWEST_FIRST[4:]]
    everything = [len(page) async for page in listing.pages(JobQuery())]
    assert everything == [5]  # no page size asked for: one stream page holds them all
    largest = [len(p) async for p in listing.pages(JobQuery(limit=MAX_STREAM_PAGE))]
    assert largest == [5]


@pytest.mark.parametrize(
    ("stream", "limit", "most"),
    [
        (False, -1, MAX_LIMIT),
        (False, MAX_LIMIT + 1, MAX_LIMIT),
        (True, -1, MAX_STREAM_PAGE),
        (True, MAX_STREAM_PAGE + 1, MAX_STREAM_PAGE),
    ],
)
async def test_a_page_size_out_of_bounds_is_refused_naming_the_field(
    ctx: Context, render: Renders, stream: bool, limit: int, most: int
) -> None:
    listing = JobListing(ctx, render, max_cached=100)
    with pytest.raises(InvalidSpec, match=f"between 1 and {most}") as refused:
        if stream:
            [_ async for _ in listing.pages(JobQuery(limit=limit))]
        else:
            await listing.page(JobQuery(limit=limit))
    assert refused.value.field == "limit"
    assert render.rendered == []


async def test_warm_renders_the_history_ahead_and_the_first_listing_renders_nothing(
    ctx: Context, render: Renders
) -> None:
    listing = JobListing(ctx, render, max_cached=100)
    assert (await listing.warm(JobQuery(include_terminal=True))).rendered == len(IDS)
    assert sorted(render.rendered) == IDS
    listed, _ = await listing.page(JobQuery(include_terminal=True))
    assert [r[0][0] for r in listed] == NEWEST_FIRST
    assert [r[1] for r in listed] == [5, 4, 3, 2, 1]  # positions read fresh all the same
    assert sorted(render.rendered) == IDS  # nothing rendered again
    assert (await listing.warm(JobQuery(include_terminal=True))).rendered == 0


async def test_warm_stops_when_the_cache_is_full(ctx: Context, render: Renders) -> None:
    listing = JobListing(ctx, render, max_cached=2)
    assert (await listing.warm(JobQuery(include_terminal=True))).rendered == 2
    assert sorted(render.rendered) == sorted(NEWEST_FIRST[:2])  # the newest, and no more
    assert len(listing) == 2


async def test_a_listing_beside_warm_renders_each_summary_once(
    ctx: Context, render: Renders
) -> None:
    listing = JobListing(ctx, render, max_cached=100)
    query = JobQuery(include_terminal=True)

    async def stream() -> list[str]:
        return [r[0][0] for page in [p async for p in listing.pages(query)] for r in page]

    rendered_ahead, streamed = await asyncio.gather(listing.warm(query), stream())
    assert streamed == NEWEST_FIRST
    assert sorted(render.rendered) == IDS  # one call waited for what the other was rendering
    assert rendered_ahead.rendered <= len(IDS)


async def test_a_summary_that_changed_after_its_key_was_read_is_cached_under_its_new_key(
    ctx: Context, render: Renders
) -> None:
    listing = JobListing(ctx, render, max_cached=100)
    keys, _ = ctx.store.list_job_keys(JobQuery())
    ctx.store.update_labels(IDS[2], {"team": "nlp"}, [], NOW + 1)  # between the two reads
    listed = await listing._listed(keys)
    assert {r[0][0]: r[0][2] for r in listed}[IDS[2]] == {"team": "nlp"}  # as read now
    again, _ = await listing.page(JobQuery())
    assert {r[0][0]: r[0][2] for r in again}[IDS[2]] == {"team": "nlp"}
    assert render.rendered.count(IDS[2]) == 1  # the next page found it under its new key


# ---- renderings kept in the store across restarts ---------------------------------------------


class RendersBytes(Renders):
    """A door that sends bytes, as the gRPC door does: (id, phase, labels) encoded."""

    def __call__(self, job: Job) -> bytes:  # type: ignore[override]
        return json.dumps(super().__call__(job)).encode()


KEEPING: Keeping[bytes] = Keeping("form-a", bytes, bytes)
EVERYTHING = JobQuery(include_terminal=True)


def decoded(listed: list[Listed[bytes]]) -> list[tuple[list[Any], int]]:
    """(rendering as (id, phase, labels), position) of each listed job."""
    return [(json.loads(rendering), position) for rendering, position, _, _ in listed]


async def test_a_restart_reads_the_kept_renderings_instead_of_rendering_them(
    ctx: Context, render: Renders
) -> None:
    first = RendersBytes()
    warmed = await JobListing(ctx, first, 100, KEEPING).warm(EVERYTHING)
    assert (warmed.rendered, warmed.loaded, warmed.kept) == (5, 0, 5)

    again = RendersBytes()  # a new process: nothing cached, the store as the first one left it
    restarted = JobListing(ctx, again, 100, KEEPING)
    listed, _ = await restarted.page(EVERYTHING)

    assert again.rendered == []
    assert decoded(listed) == [
        ([job_id, "QUEUED", {}], position)
        for job_id, position in zip(NEWEST_FIRST, [5, 4, 3, 2, 1], strict=True)
    ]
    assert (await restarted.warm(EVERYTHING)).kept == 0  # nothing new to keep


async def test_a_job_changed_after_its_rendering_was_kept_is_rendered_again(
    ctx: Context, render: Renders
) -> None:
    await JobListing(ctx, RendersBytes(), 100, KEEPING).warm(EVERYTHING)
    ctx.store.update_labels(IDS[2], {"team": "nlp"}, [], NOW + 1)
    await ctx.set_phase(IDS[0], Phase.CANCELLED, "cancelled")

    again = RendersBytes()
    listed, _ = await JobListing(ctx, again, 100, KEEPING).page(EVERYTHING)

    assert sorted(again.rendered) == [IDS[0], IDS[2]]  # the others read as kept
    shown = {rendering[0]: (rendering, position) for rendering, position in decoded(listed)}
    assert shown[IDS[2]] == ([IDS[2], "QUEUED", {"team": "nlp"}], 2)
    assert shown[IDS[0]] == ([IDS[0], "CANCELLED", {}], 0)
    assert [shown[i][1] for i in IDS[1:]] == [1, 2, 3, 4]  # positions moved up, read fresh


async def test_renderings_kept_by_other_code_are_not_served(ctx: Context, render: Renders) -> None:
    await JobListing(ctx, RendersBytes(), 100, KEEPING).warm(EVERYTHING)
    again = RendersBytes()
    other_code = Keeping("form-b", bytes, bytes)
    await JobListing(ctx, again, 100, other_code).page(EVERYTHING)
    assert sorted(again.rendered) == IDS


async def test_only_renderings_of_queued_and_ended_jobs_are_kept(
    ctx: Context, render: Renders
) -> None:
    await SchedulerLoop(ctx).run_once()  # four of the five placed (SCHEDULED), one queued
    await ctx.set_phase(IDS[0], Phase.CANCELLED, "cancelled")
    phases = {job.id: job.phase for job in ctx.store.job_summaries(IDS)}
    holding = sorted(job_id for job_id, phase in phases.items() if phase is Phase.SCHEDULED)
    assert len(holding) == 3

    warmed = await JobListing(ctx, RendersBytes(), 100, KEEPING).warm(EVERYTHING)
    again = RendersBytes()
    await JobListing(ctx, again, 100, KEEPING).page(EVERYTHING)

    assert warmed.kept == 2  # the cancelled one and the queued one
    assert sorted(again.rendered) == holding


async def test_renderings_a_failed_write_did_not_keep_are_kept_by_the_next_pass(
    ctx: Context, render: Renders, monkeypatch: pytest.MonkeyPatch
) -> None:
    listing = JobListing(ctx, RendersBytes(), 100, KEEPING)

    def locked(*_: object) -> None:
        raise OperationalError("INSERT", {}, Exception("database is locked"))

    with monkeypatch.context() as patch:
        patch.setattr(ctx.store, "keep_renderings", locked)
        with pytest.raises(Unavailable):
            await listing.warm(EVERYTHING)
    assert (await listing.warm(EVERYTHING)).kept == len(IDS)


async def test_warm_waits_while_a_listing_runs(
    ctx: Context, render: Renders, monkeypatch: pytest.MonkeyPatch
) -> None:
    listing = JobListing(ctx, render, max_cached=100)
    held, reached = asyncio.Event(), asyncio.Event()
    positions = ctx.backlog.positions

    async def held_positions(job_ids: list[str]) -> dict[str, int]:
        reached.set()
        await held.wait()  # the listing stays under way, its summaries rendered
        return await positions(job_ids)

    monkeypatch.setattr(ctx.backlog, "positions", held_positions)
    listing_call = asyncio.create_task(listing.page(JobQuery(include_terminal=True, limit=2)))
    await reached.wait()
    key_reads: list[JobQuery] = []
    real = ctx.store.list_job_keys

    def counted(query: JobQuery) -> tuple[list[JobKey], str]:
        key_reads.append(query)
        return real(query)

    monkeypatch.setattr(ctx.store, "list_job_keys", counted)
    warming = asyncio.create_task(listing.warm(EVERYTHING))
    for _ in range(5):
        await asyncio.sleep(0)  # let it run up to what it waits for
    await ctx.read(lambda: None)  # and any store read it had started, to its end
    assert key_reads == [] and not warming.done()

    held.set()  # the listing ends: warm goes on
    listed, _ = await listing_call
    warmed = await warming
    assert [r[0][0] for r in listed] == NEWEST_FIRST[:2]
    assert warmed.rendered == 3  # what the listing had not read
    assert sorted(render.rendered) == IDS


class FirstPass(logging.Handler):
    """Catches the line the first pass of `render_ahead` logs."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.logged = asyncio.Event()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "ahead of the first listing" in record.getMessage():
            self.records.append(record)
            self.logged.set()


async def rendered_ahead_record(listing: JobListing) -> logging.LogRecord:
    """The line the first pass of `render_ahead` logs."""
    logger = logging.getLogger("appliance.services.listing")
    first, level = FirstPass(), logger.level
    logger.addHandler(first)
    logger.setLevel(logging.DEBUG)
    passes = asyncio.create_task(listing.render_ahead(EVERYTHING, every=3600))
    try:
        await asyncio.wait_for(first.logged.wait(), 30)
    finally:
        passes.cancel()
        logger.removeHandler(first)
        logger.setLevel(level)
    (record,) = first.records
    return record


async def test_rendering_ahead_on_a_new_store_is_no_line_at_start_up(ctx: Context) -> None:
    record = await rendered_ahead_record(JobListing(ctx, Renders(), max_cached=100))
    assert record.levelname == "DEBUG"  # "rendered 0 job summaries" is noise to a newcomer


async def test_rendering_ahead_a_history_is_said_at_start_up(
    ctx: Context, render: Renders
) -> None:
    record = await rendered_ahead_record(JobListing(ctx, render, max_cached=100))
    assert record.levelname == "INFO"
    assert f"rendered {len(IDS)} job summaries" in record.getMessage()
