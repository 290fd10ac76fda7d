"""Cancelling every job a selection matches, or the jobs named by id, in one call (the rules of
a selection are in domain/bulk_cancel.py).

A selection is walked a chunk at a time: a keyed page of the listing's own query (newest
first, keyset-paginated on (created, id), so a job refused is not met again and a job
submitted meanwhile is not met at all) read on a reader thread; then the chunk's cancels are
decided and written in one transaction on the writer thread by the function group-committed
single cancels use (services/cancels.py `decide_and_write`), through Context.write_phases,
which announces every change. So each job gets what a single cancel gives it: the same
permission check, its event, its placements released, its watchers told, and, for a job that
holds resources, the reconciler woken to tear its replicas down. The event loop serves other
calls between chunks; a call stops after MAX_PER_CALL jobs and answers where to go on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from appliance.domain.auth import Principal
from appliance.domain.bulk_cancel import (
    MAX_LISTED,
    MAX_PER_CALL,
    BulkCancelResult,
    CancelSelection,
    checked_selection,
)
from appliance.domain.errors import NotFound, PermissionDenied
from appliance.domain.listing import JobQuery
from appliance.domain.phase_moves import PhaseChange
from appliance.domain.phases import Outcome
from appliance.services.cancels import CancelAnswer, CancelRequest, decide_and_write
from appliance.services.context import Context

CHUNK = 1_000  # jobs decided and written in one transaction


@dataclasses.dataclass
class _Tally:
    """What a call did so far: counts, and the first MAX_LISTED ids of each kind."""

    counts: dict[str, int] = dataclasses.field(
        default_factory=lambda: dict.fromkeys(("cancelled", "finished", "refused", "not_found"), 0)
    )
    ids: dict[str, list[str]] = dataclasses.field(
        default_factory=lambda: {"cancelled": [], "refused": [], "not_found": []}
    )
    refusal: str = ""  # why the first refused job was refused

    def add(self, kind: str, job_id: str) -> None:
        self.counts[kind] += 1
        listed = self.ids.get(kind)
        if listed is not None and len(listed) < MAX_LISTED:
            listed.append(job_id)

    def result(self, next_page_token: str) -> BulkCancelResult:
        c = self.counts
        return BulkCancelResult(
            cancelled=c["cancelled"], finished=c["finished"], refused=c["refused"],
            not_found=c["not_found"], cancelled_ids=tuple(self.ids["cancelled"]),
            refused_ids=tuple(self.ids["refused"]), not_found_ids=tuple(self.ids["not_found"]),
            message=self._message(next_page_token), next_page_token=next_page_token,
            refusal=self.refusal,
        )  # fmt: skip

    def _message(self, next_page_token: str) -> str:
        c = self.counts
        if not any(c.values()):
            return "no active job matched; nothing to cancel"
        parts = [f"cancelled {c['cancelled']} job{'' if c['cancelled'] == 1 else 's'}"]
        if c["finished"]:
            parts.append(f"{c['finished']} already finished, left as they were")
        if c["refused"]:
            parts.append(f"{c['refused']} refused ({self.refusal})")
        if c["not_found"]:
            parts.append(f"{c['not_found']} not found")
        if next_page_token:
            parts.append(f"stopped after {MAX_PER_CALL} jobs: call again with next_page_token")
        return "; ".join(parts)


class BulkCancel:
    """The bulk cancel use case, behind gRPC CancelJobs and REST POST /api/v1/jobs:cancel."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    async def cancel(
        self, selection: CancelSelection, *, by: Principal | None = None
    ) -> BulkCancelResult:
        """Cancel what `selection` names; `by` is the caller (None: authentication off)."""
        s = checked_selection(selection, by)
        reason = s.reason  # "": "cancelled by" whom (services/cancels.py)
        tally = _Tally()
        if s.job_ids:
            for start in range(0, len(s.job_ids), CHUNK):
                await self._cancel_chunk(s.job_ids[start : start + CHUNK], reason, by, tally)
            return tally.result("")
        query = JobQuery(
            user=s.user, labels=s.labels, phases=s.phases, limit=CHUNK, page_token=s.page_token,
            selector=s.selector,
        )  # fmt: skip
        considered = 0
        while True:
            keys, token = await self.ctx.read(self.ctx.store.list_job_keys, query)
            await self._cancel_chunk([key[0] for key in keys], reason, by, tally)
            considered += len(keys)
            if not token or considered >= MAX_PER_CALL:
                return tally.result(token)
            query = dataclasses.replace(query, page_token=token)

    async def _cancel_chunk(
        self, job_ids: Sequence[str], reason: str, by: Principal | None, tally: _Tally
    ) -> None:
        todo = list(job_ids)
        # This ends: a cancel is decided again only when its job moved on meanwhile.
        while todo:
            requests = [CancelRequest(job_id, reason, by) for job_id in todo]
            store, now = self.ctx.store, self.ctx.clock()
            outcomes = await self.ctx.write_phases(decide_and_write, store, requests, now)
            todo = []
            for job_id, outcome in zip((r.job_id for r in requests), outcomes, strict=True):
                if isinstance(outcome, PhaseChange):
                    if outcome.applied:  # write_phases announced it
                        tally.add("cancelled", job_id)
                    elif outcome.outcome in (Outcome.LOST, Outcome.ALREADY):
                        todo.append(job_id)
                    else:  # INVALID: not reached, every active phase may be cancelled
                        tally.add("finished", job_id)
                elif isinstance(outcome, CancelAnswer):
                    tally.add("finished", job_id)
                elif isinstance(outcome, NotFound):
                    tally.add("not_found", job_id)
                elif isinstance(outcome, PermissionDenied):
                    tally.refusal = tally.refusal or outcome.message
                    tally.add("refused", job_id)
                else:
                    raise outcome
