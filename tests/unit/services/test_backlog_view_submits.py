"""A submit enters the queue in memory with the entry it wrote, without a store read
(services/backlog_view.py: expect, enter), unless the job changed between its write and its
entry, or the write failed: then the job is read again, as any marked job."""

from __future__ import annotations

from typing import Any

import pytest

from appliance.domain.backlog import QueuedJob
from appliance.domain.phases import Phase
from appliance.domain.spec import Priority, validate_spec
from appliance.services.context import Context
from tests.unit.harness import NOW, PARAMS, job_service, new_jobs


@pytest.fixture
def entries_read(ctx: Context, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many jobs each read of queue entries (the view's refresh) asked for."""
    calls: list[int] = []
    read = ctx.store.queue_entries

    def counted(job_ids: Any, known: Any = None) -> Any:
        calls.append(len(list(job_ids)))
        return read(job_ids, known)

    monkeypatch.setattr(ctx.store, "queue_entries", counted)
    return calls


def entry(job_id: str) -> QueuedJob:
    [new] = new_jobs([job_id])
    return QueuedJob(job_id, new.spec.priority, NOW, new.plan, new.spec.queue)


async def test_submits_enter_the_index_without_a_store_read(
    ctx: Context, entries_read: list[int]
) -> None:
    await ctx.backlog.current()  # built (from an empty store)
    jobs = job_service(ctx)
    submitted = []
    for priority in (Priority.P3, Priority.P1, Priority.P2, Priority.P1):
        spec = validate_spec(params_yaml=PARAMS, num_csx=1, num_steps=5, priority=priority)
        submitted.append((await jobs.submit(spec, "alice")).id)
    positions = await ctx.backlog.positions(submitted)
    assert positions == ctx.store.queue_positions(submitted)
    assert sorted(positions.values()) == [1, 2, 3, 4]
    assert entries_read == []
    # The scheduler's next pass leaves them to the pass after, as jobs a refresh found.
    assert ctx.backlog.entered_after(0) == set(submitted)
    jobs.close()


async def test_a_job_that_changed_before_its_entry_is_read_again(
    ctx: Context, entries_read: list[int]
) -> None:
    view = ctx.backlog
    await view.current()
    view.expect("wsjob-late0000000001")
    ctx.store.create_jobs(new_jobs(["wsjob-late0000000001"]), NOW)  # the submit's write
    # Before the submit resumes: the job is cancelled, and a read applies that.
    await ctx.set_phase("wsjob-late0000000001", Phase.CANCELLED, "cancelled")
    await view.current()
    view.enter("wsjob-late0000000001", entry("wsjob-late0000000001"))  # the submit resumes
    index = await view.current()
    assert "wsjob-late0000000001" not in index
    assert entries_read == [1, 1]  # the cancel's mark, and the entry's, each read


@pytest.mark.parametrize("written", [True, False])
async def test_a_failed_write_leaves_the_job_to_a_read(
    ctx: Context, entries_read: list[int], written: bool
) -> None:
    view = ctx.backlog
    await view.current()
    view.expect("wsjob-fail0000000001")
    if written:  # e.g. the commit happened, and its caller was cancelled
        ctx.store.create_jobs(new_jobs(["wsjob-fail0000000001"]), NOW)
    view.enter("wsjob-fail0000000001", None)
    index = await view.current()
    assert ("wsjob-fail0000000001" in index) is written
    assert entries_read == [1]


async def test_an_entry_before_the_index_is_built_is_left_to_the_build(ctx: Context) -> None:
    view = ctx.backlog
    view.expect("wsjob-early000000001")
    ctx.store.create_jobs(new_jobs(["wsjob-early000000001"]), NOW)
    view.enter("wsjob-early000000001", entry("wsjob-early000000001"))
    assert await view.positions(["wsjob-early000000001"]) == {"wsjob-early000000001": 1}
