"""Array use cases (`csctl get array`, acting on a whole array): the one resolution of an
array's id to its tasks' ids, which every verb that acts on jobs uses when the id it is given
names no job (cancel, set-priority; hold and release alike), and the array's view with each
task's final loss and evaluation from its chief's metrics.jsonl (services/job_curves.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from appliance.domain.array_view import ArrayTaskRow, ArrayView
from appliance.domain.arrays import array_of
from appliance.domain.auth import Principal, may_act_on
from appliance.domain.curves import Curves
from appliance.domain.errors import InvalidSpec, NotFound, job_not_found
from appliance.domain.ids import is_job_id
from appliance.domain.job import Job
from appliance.domain.phases import Phase
from appliance.services.context import Context
from appliance.services.job_curves import read_curves

Blocking = Callable[..., Awaitable[Any]]


class ArrayService:
    """Reading arrays and resolving their ids."""

    def __init__(self, ctx: Context, blocking: Blocking) -> None:
        self._ctx = ctx
        self._blocking = blocking

    async def tasks(self, array_id: str) -> list[Job]:
        """The summaries of the array's tasks by index; NotFound naming `array_id` when the
        id names no array (a task's id `wsjob-…_7` names its task, not an array)."""
        if not is_job_id(array_id) or array_of(array_id) is not None:
            raise InvalidSpec(
                f"{array_id[:80]!r} is not an array id; array ids look like "
                "wsjob-0a1b2c3d4e5f6g (its tasks are wsjob-0a1b2c3d4e5f6g_<index>)",
                field="array_id",
            )
        tasks = await self._ctx.read(self._ctx.store.array_tasks, array_id)
        if not tasks:
            raise NotFound(f"array {array_id} not found", field="array_id")
        return [self._ctx.backlog.shown(job) for job in tasks]  # why the queued ones wait

    async def task_ids(self, array_id: str) -> list[str]:
        """The ids of the array's tasks by index: the one resolution of "array id → its
        tasks" for the verbs that act on jobs (call it when the id names no job)."""
        return [job.id for job in await self.tasks(array_id)]

    async def task_ids_of_missing_job(self, job_id: str) -> list[str]:
        """The tasks of the array `job_id` names, for a verb whose job id named no job; that
        job's NotFound when it names no array either (a task's id names no array)."""
        if array_of(job_id) is not None:
            raise job_not_found(job_id)
        try:
            return await self.task_ids(job_id)
        except NotFound:
            raise job_not_found(job_id) from None

    async def task_ids_if_array(self, job_id: str) -> list[str]:
        """The tasks' ids when `job_id` (which names no job) names an array; else none."""
        try:
            return await self.task_ids(job_id)
        except (InvalidSpec, NotFound):
            return []

    async def view(self, array_id: str, *, by: Principal | None = None) -> ArrayView:
        """Each task's overrides, phase, reason and final loss and evaluation: from its
        curves when the coordinator sees its model dir, else from its last progress report.
        Anyone who may list the jobs may read it (the overrides are the owner's to see)."""
        tasks = await self.tasks(array_id)
        first = tasks[0]
        shown = may_act_on(by, first.user, first.groups)
        curves: list[Curves] = await self._blocking(_curves_of, tasks)
        rows = tuple(_row(job, c, shown) for job, c in zip(tasks, curves, strict=True))
        cap = first.array.cap if first.array is not None else 0
        return ArrayView(array_id, first.user, cap, rows)


def _curves_of(tasks: list[Job]) -> list[Curves]:
    """Each task's curves (blocking: reads each model dir's metrics.jsonl, bounded)."""
    return [read_curves(job.spec.model_dir, job.id) for job in tasks]


def _row(job: Job, curves: Curves, shown: bool) -> ArrayTaskRow:
    task = job.array
    assert task is not None
    queued = job.phase is Phase.QUEUED
    progress = job.progress
    step, loss = progress.step, (progress.loss if progress.step else None)
    if curves.train:
        step, loss = curves.train[-1].step, curves.train[-1].loss
    eval_loss, accuracy = progress.eval_loss, progress.eval_accuracy
    if curves.evals:
        eval_loss, accuracy = curves.evals[-1].loss, curves.evals[-1].accuracy
    return ArrayTaskRow(
        job_id=job.id,
        index=task.index,
        overrides=dict(task.overrides) if shown else {},
        phase=job.phase,
        reason=job.pending_reason if queued else job.reason,
        reason_code=job.pending_reason_code if queued else job.reason_code,
        step=step,
        loss=loss,
        eval_loss=eval_loss,
        eval_accuracy=accuracy,
    )
