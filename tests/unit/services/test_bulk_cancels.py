"""Bulk cancel below any door (services/bulk_cancels.py) over a real store: what a selection
matches, who may cancel what, what each cancelled job gets (event, release, announcement), the
chunks and the bound of one call, and the selections refused before anything is read."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from appliance.domain.auth import Principal
from appliance.domain.bulk_cancel import MAX_IDS, CancelSelection
from appliance.domain.errors import InvalidSpec, PermissionDenied
from appliance.domain.phase_moves import PhaseMove
from appliance.domain.phases import Phase
from appliance.domain.selectors import parse_selector
from appliance.domain.spec import JobSpec, validate_spec
from appliance.loops.scheduling import SchedulerLoop
from appliance.services import bulk_cancels
from appliance.services.bulk_cancels import BulkCancel
from appliance.services.context import Context
from appliance.services.jobs import JobService
from tests.unit.harness import PARAMS, job_service

ALICE = Principal("alice", groups=("nlp",))
CAROL = Principal("carol", groups=("nlp",))
BOB = Principal("bob", groups=("cv",))
ROOT = Principal("root", admin=True)


def spec(num_csx: int = 1, **labels: str) -> JobSpec:
    return validate_spec(params_yaml=PARAMS, num_csx=num_csx, num_steps=5, labels=labels)


@pytest.fixture
def jobs(ctx: Context) -> JobService:
    return job_service(ctx)


@pytest.fixture
def bulk(ctx: Context) -> BulkCancel:
    return BulkCancel(ctx)


async def _submit(jobs: JobService, by: Principal, count: int = 1, **labels: str) -> list[str]:
    return [(await jobs.submit(spec(**labels), "", by=by)).id for _ in range(count)]


def _phases(ctx: Context, job_ids: Sequence[str]) -> list[Phase]:
    return [ctx.store.phase_of(job_id) for job_id in job_ids]


async def test_mine_cancels_the_callers_jobs_and_leaves_everyone_elses(
    ctx: Context, jobs: JobService, bulk: BulkCancel
) -> None:
    alices, bobs = await _submit(jobs, ALICE, 3), await _submit(jobs, BOB, 2)

    result = await bulk.cancel(CancelSelection(mine=True), by=BOB)

    assert (result.cancelled, result.refused, result.finished) == (2, 0, 0)
    assert sorted(result.cancelled_ids) == sorted(bobs)
    assert result.message == "cancelled 2 jobs"
    assert _phases(ctx, bobs) == [Phase.CANCELLED] * 2
    assert _phases(ctx, alices) == [Phase.QUEUED] * 3
    for job_id in bobs:  # each recorded as a single cancel records it
        [*_, event] = await jobs.events(job_id)
        assert (event.from_phase, event.to_phase) == (Phase.QUEUED, Phase.CANCELLED)
        assert event.reason == "cancelled by bob"
    again = await bulk.cancel(CancelSelection(mine=True), by=BOB)
    assert (again.cancelled, again.message) == (0, "no active job matched; nothing to cancel")


async def test_another_users_jobs_are_refused_untouched_unless_group_or_admin(
    ctx: Context, jobs: JobService, bulk: BulkCancel
) -> None:
    alices = await _submit(jobs, ALICE, 3)

    refused = await bulk.cancel(CancelSelection(user="alice"), by=BOB)

    assert (refused.cancelled, refused.refused) == (0, 3)
    assert sorted(refused.refused_ids) == sorted(alices)
    assert refused.refusal.startswith("bob may not cancel a job of alice: only its owner")
    assert "3 refused (bob may not cancel" in refused.message
    assert _phases(ctx, alices) == [Phase.QUEUED] * 3
    assert [len(await jobs.events(job_id)) for job_id in alices] == [1, 1, 1]  # no event

    by_group = await bulk.cancel(CancelSelection(user="alice", reason="sweep"), by=CAROL)
    assert (by_group.cancelled, by_group.refused) == (3, 0)
    assert {(await jobs.events(j))[-1].reason for j in alices} == {"sweep"}


async def test_a_mixed_selection_cancels_exactly_what_matches_every_filter(
    ctx: Context, jobs: JobService, bulk: BulkCancel
) -> None:
    """Labels and a phase together, over several users' jobs, by an admin."""
    running = await _submit(jobs, ALICE, 2, team="x")
    await SchedulerLoop(ctx).run_once()  # these two are placed (SCHEDULED)
    queued_x = await _submit(jobs, ALICE, 1, team="x") + await _submit(jobs, BOB, 1, team="x")
    queued_y = await _submit(jobs, BOB, 2, team="y")
    assert _phases(ctx, running) == [Phase.SCHEDULED] * 2

    selection = CancelSelection(labels={"team": "x"}, phases=frozenset({Phase.QUEUED}))
    result = await bulk.cancel(selection, by=ROOT)

    assert sorted(result.cancelled_ids) == sorted(queued_x)
    assert _phases(ctx, queued_x) == [Phase.CANCELLED] * 2
    assert _phases(ctx, running + queued_y) == [Phase.SCHEDULED] * 2 + [Phase.QUEUED] * 2
    every = await bulk.cancel(CancelSelection(all=True), by=ROOT)
    assert (every.cancelled, every.refused) == (4, 0)


async def test_a_job_holding_systems_is_released_announced_and_left_to_the_reconciler(
    ctx: Context, jobs: JobService, bulk: BulkCancel
) -> None:
    [job_id] = await _submit(jobs, ALICE, 1)
    await SchedulerLoop(ctx).run_once()
    assert ctx.store.phase_of(job_id) is Phase.SCHEDULED and ctx.store.node_holders()
    ctx.bus.reconcile_wanted.clear()
    ctx.bus.schedule_wanted.clear()

    with ctx.bus.subscribe(job_id) as watched:
        result = await bulk.cancel(CancelSelection(mine=True), by=ALICE)
        event = watched.get_nowait()

    assert result.cancelled_ids == (job_id,)
    assert (event.from_phase, event.to_phase) == (Phase.SCHEDULED, Phase.CANCELLED)
    assert not ctx.store.node_holders()  # released in the same transaction
    assert ctx.bus.reconcile_wanted.is_set()  # the reconciler tears the replicas down
    assert ctx.bus.schedule_wanted.is_set()  # and the scheduler has systems again


async def test_ids_are_answered_each_as_a_single_cancel_would_be(
    ctx: Context, jobs: JobService, bulk: BulkCancel
) -> None:
    [mine, finished] = await _submit(jobs, BOB, 2)
    [others] = await _submit(jobs, ALICE, 1)
    ctx.store.set_phase(finished, Phase.FAILED, "broke", ctx.clock())
    unknown = "wsjob-000000000000"

    ids = (mine, finished, others, unknown, mine)
    result = await bulk.cancel(CancelSelection(job_ids=ids), by=BOB)

    assert (result.cancelled, result.finished, result.refused, result.not_found) == (1, 1, 1, 1)
    assert (result.cancelled_ids, result.refused_ids) == ((mine,), (others,))
    assert result.not_found_ids == (unknown,)
    assert _phases(ctx, [mine, finished, others]) == [Phase.CANCELLED, Phase.FAILED, Phase.QUEUED]


async def test_a_selection_goes_in_chunks_and_a_call_stops_at_its_bound(
    ctx: Context, jobs: JobService, bulk: BulkCancel, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_ids = await _submit(jobs, ALICE, 5) + await _submit(jobs, BOB, 1)
    monkeypatch.setattr(bulk_cancels, "CHUNK", 2)
    monkeypatch.setattr(bulk_cancels, "MAX_PER_CALL", 3)
    written: list[int] = []
    set_phases = ctx.store.set_phases

    def spy(moves: Sequence[PhaseMove], now: float) -> Any:
        written.append(len(moves))
        return set_phases(moves, now)

    monkeypatch.setattr(ctx.store, "set_phases", spy)
    selection = CancelSelection(all=True)

    first = await bulk.cancel(selection, by=ROOT)
    assert (first.cancelled, bool(first.next_page_token)) == (4, True)
    assert "stopped after 3 jobs" in first.message
    rest = await bulk.cancel(CancelSelection(all=True, page_token=first.next_page_token), by=ROOT)
    assert (rest.cancelled, rest.next_page_token) == (2, "")
    assert written == [2, 2, 2]  # one transaction a chunk
    # The second call went on where the first stopped: every job once.
    assert sorted(first.cancelled_ids + rest.cancelled_ids) == sorted(job_ids)


async def test_a_refused_job_is_not_met_again_by_the_next_chunk(
    ctx: Context, jobs: JobService, bulk: BulkCancel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk_cancels, "CHUNK", 1)
    alices = await _submit(jobs, ALICE, 3, team="x")
    bobs = await _submit(jobs, BOB, 1, team="x")

    result = await bulk.cancel(CancelSelection(labels={"team": "x"}), by=BOB)

    assert (result.cancelled, result.refused) == (1, 3)
    assert result.cancelled_ids == tuple(bobs) and set(result.refused_ids) == set(alices)


@pytest.mark.parametrize(
    ("selection", "by", "field", "says"),
    [
        (CancelSelection(), None, "all", "say whose jobs to cancel"),
        (CancelSelection(phases=frozenset({Phase.QUEUED})), None, "all", "phases only narrow"),
        (CancelSelection(selector=parse_selector("!nothing")), ROOT, "all", "!k only narrow"),
        (CancelSelection(selector=parse_selector("a!=b,c notin (d)")), ROOT, "all", "only narrow"),
        (CancelSelection(user="a", job_ids=("wsjob-000000000000",)), None, "job_ids", "not both"),
        (CancelSelection(user="../../etc"), None, "user", "user must be 1-253 characters"),
        (CancelSelection(user="x" * 300), None, "user", "user must be 1-253 characters"),
        (CancelSelection(mine=True), None, "user", "mine needs the caller's user name"),
        (CancelSelection(all=True, user="bob"), ROOT, "all", "leave out user and mine"),
        (CancelSelection(all=True), BOB, "all", "all is for admins"),
        (
            CancelSelection(user="bob", phases=frozenset({Phase.SUCCEEDED})),
            None,
            "phases",
            "SUCCEEDED is a finished phase",
        ),
        (CancelSelection(labels={f"k{i}": "v" for i in range(65)}), None, "labels", "at most 64"),
        (CancelSelection(labels={"k" * 100_000: "v"}), None, "labels", "a key is at most 317"),
        (CancelSelection(labels={"k": "v" * 100_000}), None, "labels", "a value at most 63"),
        (CancelSelection(labels={"k": "a b"}), None, "labels", "label value 'a b'"),
        (CancelSelection(job_ids=("wsjob-../../x",)), None, "job_ids", "is not a job id"),
        (
            CancelSelection(job_ids=tuple(f"wsjob-{i:014d}" for i in range(MAX_IDS + 1))),
            None,
            "job_ids",
            f"at most {MAX_IDS} job ids",
        ),
        (CancelSelection(user="bob", reason="a\x1b[2Jb"), None, "reason", "one line"),
        (CancelSelection(user="bob", page_token="x" * 513), None, "page_token", "not one"),
        (CancelSelection(user="bob", page_token="garbage"), None, "page_token", "not one"),
    ],
)
async def test_hostile_or_empty_selections_are_refused_naming_the_field(
    ctx: Context,
    jobs: JobService,
    bulk: BulkCancel,
    selection: CancelSelection,
    by: Principal | None,
    field: str,
    says: str,
) -> None:
    [job_id] = await _submit(jobs, BOB, 1)
    with pytest.raises((InvalidSpec, PermissionDenied)) as refused:
        await bulk.cancel(selection, by=by)
    assert refused.value.field == field
    assert says in refused.value.message
    assert len(refused.value.message) < 300 and "\n" not in refused.value.message
    assert ctx.store.phase_of(job_id) is Phase.QUEUED
