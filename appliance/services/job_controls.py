"""Changing a submitted job: cancel, priority, labels, lease. An id that names no job but an
array acts on each of the array's tasks (services/arrays.py resolves it)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from appliance.domain.auth import Principal, check_may_act_on, check_may_use_priority
from appliance.domain.errors import InvalidSpec, NotFound, job_not_found
from appliance.domain.ids import is_job_id
from appliance.domain.job import Job
from appliance.domain.spec import (
    MAX_HOLDER,
    MAX_REASON,
    Priority,
    validate_labels,
    validate_text,
)
from appliance.services.arrays import ArrayService
from appliance.services.cancels import CancelBatcher, CancelRequest
from appliance.services.context import Context


class JobControls:
    """JobService's part for changing jobs."""

    _ctx: Context
    _cancels: CancelBatcher
    arrays: ArrayService

    async def cancel(
        self, job_id: str, reason: str = "", *, by: Principal | None = None
    ) -> tuple[Job, bool, str]:
        """Cancel a job; cancelling a terminal job changes nothing and says so. Concurrent
        cancels are group-committed (services/cancels.py)."""
        check_job_id(job_id)
        why = validate_text(reason, "reason", MAX_REASON)  # "": "cancelled by" whom
        try:
            answer = await self._cancels.cancel(CancelRequest(job_id, why, by))
        except NotFound:  # an array's id: each of its tasks (group-committed together)
            ids = await self.arrays.task_ids_of_missing_job(job_id)
            answers = await asyncio.gather(
                *(self._cancels.cancel(CancelRequest(i, why, by)) for i in ids)
            )
            changed = sum(a.changed for a in answers)
            said = f"{changed} of the {len(ids)} tasks of array {job_id} cancelled"
            return answers[0].job, bool(changed), said
        return answer.job, answer.changed, answer.message

    async def set_priority(
        self, job_id: str, priority: Priority, *, by: Principal | None = None
    ) -> Job:
        """Re-prioritise a queued or running job; the queue re-orders at once."""
        check_job_id(job_id)
        try:
            return await self._set_priority(job_id, priority, by)
        except NotFound:  # an array's id: each of its tasks; the first task's job answers
            jobs = [
                await self._set_priority(i, priority, by)
                for i in await self.arrays.task_ids_of_missing_job(job_id)
            ]
            return jobs[0]

    async def _set_priority(self, job_id: str, priority: Priority, by: Principal | None) -> Job:
        if by is not None:
            await self._check_owner(job_id, by, "re-prioritise")
            check_may_use_priority(by, priority)
        job = await self._ctx.db(self._ctx.store.set_priority, job_id, priority, self._ctx.clock())
        self._ctx.backlog.mark(job_id)
        self._ctx.bus.wake_scheduler()
        self._ctx.bus.touched(job_id)
        return job

    async def update_labels(
        self,
        job_id: str,
        set_labels: Mapping[str, str],
        remove: Sequence[str],
        *,
        by: Principal | None = None,
    ) -> Job:
        check_job_id(job_id)
        validate_labels(set_labels)
        if by is not None:
            await self._check_owner(job_id, by, "relabel")
        job = await self._ctx.db(
            self._ctx.store.update_labels,
            job_id,
            dict(set_labels),
            list(remove),
            self._ctx.clock(),
        )
        self._ctx.bus.touched(job_id)
        return job

    async def renew_lease(self, job_id: str, holder: str, *, by: Principal | None = None) -> Job:
        check_job_id(job_id)
        if by is not None:
            await self._check_owner(job_id, by, "hold the lease of")
        return await self._ctx.db(
            self._ctx.store.renew_lease,
            job_id,
            validate_text(holder, "holder", MAX_HOLDER),
            self._ctx.clock(),
        )

    async def _check_owner(self, job_id: str, by: Principal, what: str) -> None:
        job = await self._summary(job_id)
        check_may_act_on(by, job.user, job.groups, what)

    async def _summary(self, job_id: str) -> Job:
        """The job's summary (owner, groups, phase) read on the writer's thread, so a decision
        taken on it is ordered with the writes that follow; raises NotFound."""
        found = await self._ctx.db(self._ctx.store.job_summaries, [job_id])
        if not found:
            raise job_not_found(job_id)
        return found[0]


def check_job_id(job_id: str) -> None:
    if not is_job_id(job_id):
        raise InvalidSpec(
            f"{job_id[:80]!r} is not a job id; job ids look like wsjob-0a1b2c3d4e5f6g",
            field="job_id",
        )
