"""Cancelling jobs, group-committed: concurrent cancels are decided and written together.

A batch reads the summaries of its jobs in one query on the store's writer thread (so what is
decided on is ordered with the write that follows) and decides each cancel on its own: an
unknown job, a caller who may not cancel it and a job that already ended are answered as a
single cancel would be, without failing the others. The cancels that may go ahead are written
by JobStore.set_phases in one transaction (compare-and-set on the phase decided on, an event
each, placements released), through Context.write_phases, which announces each change.
A cancel that lost a race (its job moved on between the read and the write) is decided again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from appliance.domain.auth import JobOwner, Principal, check_may_act_on
from appliance.domain.errors import ApplianceError, Conflict, NotFound, job_not_found
from appliance.domain.job import Job
from appliance.domain.phase_moves import PhaseChange, PhaseMove
from appliance.domain.phases import Outcome, Phase
from appliance.domain.reasons import Reason, ReasonCode, said
from appliance.services.context import Context
from appliance.services.group_commit import GroupCommit
from appliance.store.jobs import JobStore


@dataclasses.dataclass(frozen=True)
class CancelRequest:
    job_id: str
    reason: str  # recorded as the job's reason ("": "cancelled by" whom)
    by: Principal | None = None  # the authenticated caller; None: authentication is off


@dataclasses.dataclass(frozen=True)
class CancelAnswer:
    job: Job
    changed: bool  # False: the job had already ended, and was left as it was
    message: str


class CancelBatcher:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._commit = GroupCommit[CancelRequest, CancelAnswer](self._cancel_batch)

    async def cancel(self, request: CancelRequest) -> CancelAnswer:
        return await self._commit.write(request)

    async def _cancel_batch(self, batch: list[CancelRequest]) -> list[CancelAnswer | Exception]:
        answers: list[CancelAnswer | Exception | None] = [None] * len(batch)
        todo = list(range(len(batch)))
        # This ends: a cancel is decided again only when its job moved on to a later phase.
        while todo:
            requests = [batch[i] for i in todo]
            store, now = self.ctx.store, self.ctx.clock()
            outcomes = await self.ctx.write_phases(decide_and_write, store, requests, now)
            applied: list[int] = []
            again: list[int] = []
            for index, outcome in zip(todo, outcomes, strict=True):
                if not isinstance(outcome, PhaseChange):
                    answers[index] = outcome
                elif outcome.applied:  # write_phases announced it
                    applied.append(index)
                elif outcome.outcome in (Outcome.LOST, Outcome.ALREADY):
                    again.append(index)
                else:
                    answers[index] = Conflict(f"job {batch[index].job_id} cannot be cancelled now")
            if applied:
                ids = [batch[i].job_id for i in applied]
                jobs = {job.id: job for job in await self.ctx.read(self.ctx.store.get_jobs, ids)}
                for index in applied:
                    job_id = batch[index].job_id
                    job = jobs.get(job_id)
                    answers[index] = (
                        CancelAnswer(job, True, f"job {job_id} cancelled")
                        if job is not None
                        else _not_found(batch[index])
                    )
            todo = again
        return [answer for answer in answers if answer is not None]


def decide_and_write(
    store: JobStore, requests: Sequence[CancelRequest], now: float
) -> list[PhaseChange | CancelAnswer | ApplianceError]:
    """On the store's writer thread: one read of the jobs' phases and owners, a decision per
    request, one transaction for the cancels that go ahead. Answers in request order. Bulk
    cancels (services/bulk_cancels.py) write their chunks through it too."""
    owners = store.job_owners(list({r.job_id for r in requests}))
    decided: list[PhaseMove | str | ApplianceError] = []
    for request in requests:
        try:
            decided.append(decide_cancel(request, owners.get(request.job_id)))
        except ApplianceError as exc:
            decided.append(exc)
    moves = [d for d in decided if isinstance(d, PhaseMove)]
    changes = iter(store.set_phases(moves, now) if moves else ())
    ended = [r.job_id for r, d in zip(requests, decided, strict=True) if isinstance(d, str)]
    summaries = {job.id: job for job in store.job_summaries(ended)} if ended else {}
    answers: list[PhaseChange | CancelAnswer | ApplianceError] = []
    for request, decision in zip(requests, decided, strict=True):
        if isinstance(decision, PhaseMove):
            answers.append(next(changes))
        elif isinstance(decision, str):
            job = summaries.get(request.job_id)
            answers.append(
                CancelAnswer(job, False, decision) if job is not None else _not_found(request)
            )
        else:
            answers.append(decision)
    return answers


def decide_cancel(request: CancelRequest, owner: JobOwner | None) -> PhaseMove | str:
    """What cancelling a job (None: unknown) does: the move to write, or, for a job that
    already ended, the answer saying so. Raises NotFound or PermissionDenied."""
    if owner is None:
        raise _not_found(request)
    if request.by is not None:
        check_may_act_on(request.by, owner.user, owner.groups, "cancel")
    if owner.phase is Phase.CANCELLED:
        return f"job {request.job_id} was already cancelled"
    if owner.phase.terminal:
        return f"job {request.job_id} already {owner.phase.value}; nothing to cancel"
    return PhaseMove(
        request.job_id, Phase.CANCELLED, cancel_reason(request, owner.user), owner.phase
    )


def cancel_reason(request: CancelRequest, owner: str) -> Reason:
    """Why a job of `owner` is cancelled: by a user (its owner, a member of its groups, anyone
    when authentication is off) or by an admin acting on someone else's job."""
    by = request.by
    admin = by is not None and by.admin and by.user != owner
    code = ReasonCode.CANCELLED_BY_ADMIN if admin else ReasonCode.CANCELLED_BY_USER
    return said(code, text=request.reason, by=by.user if by is not None else "")


def _not_found(request: CancelRequest) -> NotFound:
    return job_not_found(request.job_id)
