"""Hold, release, suspend and resume jobs (#37; the rules: domain/holds.py).

A hold or a release is a write of the job's hold (store/holds.py) that bumps its version;
then the job's queue entry is marked (the index re-reads it: a held job is stepped over, a
released one takes its place again), the scheduler woken (the reasons it publishes say
"held by ..."), and the change announced to watchers. A suspension puts a hold on a running
job and asks for its requeue with a checkpoint first, as a preemption does
(Context.request_requeue; the reconciler tears the attempt down once the chief wrote it, and
the job is queued again, held, to resume exactly from that checkpoint).

Hold and release take an array's id too (as Slurm's `scontrol hold <array>`): each of its
tasks that is queued (held, to release) is held (released); the others are left as they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

from appliance.domain.auth import Principal
from appliance.domain.errors import Conflict, NotFound, job_not_found
from appliance.domain.holds import check_may_hold, hold_by
from appliance.domain.job import Job
from appliance.services.arrays import ArrayService
from appliance.services.context import Context
from appliance.services.job_controls import check_job_id

Act = Callable[[str, "Principal | None"], Awaitable["HoldOutcome"]]


@dataclasses.dataclass(frozen=True)
class HoldOutcome:
    """What a hold, release, suspend or resume did: the job as it is now, whether it changed,
    and one sentence saying so."""

    job: Job
    changed: bool
    message: str


class HoldService:
    """The hold, release, suspend and resume use cases every door calls (the rules of who
    may: domain/holds.py)."""

    def __init__(self, ctx: Context, arrays: ArrayService, checkpoint_grace: float = 30.0) -> None:
        """`arrays`: resolves an array's id to its tasks'; `checkpoint_grace`: seconds a
        suspended job's chief has to write its checkpoint (the preemption grace,
        APPLIANCE_PREEMPTION_GRACE_SECONDS)."""
        self._ctx = ctx
        self._arrays = arrays
        self._grace = checkpoint_grace

    async def hold(self, job_id: str, *, by: Principal | None = None) -> HoldOutcome:
        """Hold a queued job (or an array's queued tasks): it keeps its place and waits until
        released."""
        try:
            return await self._hold(job_id, by)
        except NotFound:
            return await self._each_task(job_id, by, "held", self._hold)

    async def release(
        self, job_id: str, *, by: Principal | None = None, resume: bool = False
    ) -> HoldOutcome:
        """Release a held job (or an array's held tasks; `resume`: a suspended job): it takes
        its place again."""
        try:
            return await self._release(job_id, by, resume)
        except NotFound:
            if resume:
                raise
            return await self._each_task(job_id, by, "released", self._release)

    async def _each_task(
        self, array_id: str, by: Principal | None, done: str, act: Act
    ) -> HoldOutcome:
        """`act` on each task of the array `array_id` names (NotFound when it names none);
        a task in no phase for it is left as it is."""
        ids = await self._arrays.task_ids_of_missing_job(array_id)
        outcomes = []
        for task in ids:
            try:
                outcomes.append(await act(task, by))
            except Conflict:  # running or ended (or not held): not this verb's
                continue
        changed = sum(o.changed for o in outcomes)
        job = outcomes[0].job if outcomes else (await self._owned(ids[0], by, "hold"))
        return HoldOutcome(
            job, bool(changed), f"{changed} of the {len(ids)} tasks of array {array_id} {done}"
        )

    async def _hold(self, job_id: str, by: Principal | None) -> HoldOutcome:
        job = await self._owned(job_id, by, "hold")
        held, changed = await self._ctx.db(
            self._ctx.store.hold_job, job_id, hold_by(by, job.user), self._ctx.clock()
        )
        self._changed(job_id, changed)
        held = self._ctx.backlog.shown(held)
        assert held.hold is not None
        said_ = f"job {job_id} held" if changed else f"job {job_id} already held by {held.hold.by}"
        return HoldOutcome(held, changed, said_)

    async def _release(
        self, job_id: str, by: Principal | None, resume: bool = False
    ) -> HoldOutcome:
        verb = "resume" if resume else "release"
        await self._owned(job_id, by, verb)
        released, changed = await self._ctx.db(
            self._ctx.store.release_job, job_id, by, self._ctx.clock(), resume=resume
        )
        self._changed(job_id, changed)
        released = self._ctx.backlog.shown(released)
        done = "resumed" if resume else "released"
        said_ = f"job {job_id} {done}" if changed else f"job {job_id} is not held; nothing to do"
        return HoldOutcome(released, changed, said_)

    async def suspend(self, job_id: str, *, by: Principal | None = None) -> HoldOutcome:
        """Suspend a running job: checkpoint (when it has a model dir), give its systems back,
        wait held until resumed."""
        job = await self._owned(job_id, by, "suspend")
        hold = hold_by(by, job.user, suspended=True)
        held, changed = await self._ctx.db(
            self._ctx.store.hold_job, job_id, hold, self._ctx.clock()
        )
        if not changed:
            return HoldOutcome(held, False, f"job {job_id} is already suspended")
        checkpoints = bool(job.spec.model_dir)
        await self._ctx.request_requeue(
            job_id, job.attempt, hold.reason,
            checkpoint_within=self._grace if checkpoints else 0.0,
        )  # fmt: skip
        self._changed(job_id, changed)
        how = "checkpointing, then" if checkpoints else "without a model dir to checkpoint to;"
        return HoldOutcome(held, True, f"job {job_id} suspended: {how} its systems go back")

    async def _owned(self, job_id: str, by: Principal | None, verb: str) -> Job:
        """The job's summary, read on the writer's thread; PermissionDenied unless `by` may
        `verb` it; NotFound."""
        check_job_id(job_id)
        found = await self._ctx.db(self._ctx.store.job_summaries, [job_id])
        if not found:
            raise job_not_found(job_id)
        job = found[0]
        check_may_hold(by, job.user, job.groups, verb)
        return job

    def _changed(self, job_id: str, changed: bool) -> None:
        """A hold changed: its queue entry is read again, a pass says why it waits (or
        admits it), and watchers hear of it."""
        if not changed:
            return
        self._ctx.backlog.mark(job_id)
        self._ctx.bus.wake_scheduler()
        self._ctx.bus.touched(job_id)
