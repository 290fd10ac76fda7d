"""Submitting an array (`--array`, `--sweep`): N tasks, each its own job `wsjob-<array>_<i>`,
written in one transaction (all or nothing) and queued together. The tasks' specs come from
domain/array_specs.py; each is planned and placed as a single job's submit places it
(services/jobs.py), and every task counts as a job waiting to run for the user's limits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from appliance.domain.array_specs import task_specs
from appliance.domain.arrays import ArrayTask, TaskOf, task_id
from appliance.domain.auth import Principal
from appliance.domain.backlog import QueuedJob
from appliance.domain.holds import hold_by
from appliance.domain.ids import new_job_id
from appliance.domain.job import Job
from appliance.domain.params_keys import notes_of
from appliance.domain.plan import Pool, ReplicaPlan, plan_replicas
from appliance.domain.queues import QueueSpec
from appliance.domain.reasons import Reason
from appliance.domain.spec import JobSpec, Mode, checkpoint_path_of
from appliance.services.context import Context
from appliance.services.metrics import Door
from appliance.services.offload import Offload
from appliance.services.queues import QueueService
from appliance.store.jobs import NewJob

# spec, resume, user, job id, by, choose -> the spec placed (JobService._place).
Place = Callable[[JobSpec, "str | None", str, str, "Principal | None", bool], JobSpec]
Blocking = Callable[..., Awaitable[Any]]

_Planned = tuple[ArrayTask, JobSpec, ReplicaPlan, "str | None", tuple[Reason, ...]]


def plan_tasks(spec: JobSpec, pool: Pool) -> tuple[int, list[_Planned]]:
    """The array's cap and its tasks, each with its spec, plan, the checkpoint it starts from
    and its params' warnings (one process's work for the whole array)."""
    cap, tasks = task_specs(spec)
    planned = []
    for task, task_spec in tasks:
        notes = tuple(n.reason for n in notes_of(task_spec.params, task_spec.model_dir))
        plan = plan_replicas(task_spec, pool)
        planned.append((task, task_spec, plan, checkpoint_path_of(task_spec), notes))
    return cap, planned


class ArraySubmits:
    """The submit of an array; JobService.submit hands it the specs that make one."""

    def __init__(
        self,
        ctx: Context,
        queues: QueueService,
        offload: Offload,
        blocking: Blocking,
        place: Place,
        *,
        chooses_checkpoints: bool,
    ) -> None:
        self._ctx, self._queues, self._offload = ctx, queues, offload
        self._blocking, self._place = blocking, place
        self._chooses_checkpoints = chooses_checkpoints

    async def submit(
        self,
        spec: JobSpec,
        user: str,
        by: Principal | None,
        queue: QueueSpec,
        pool: Pool,
        count: int,
        *,
        door: Door,
        refuse_never_runs: bool,
    ) -> list[Job]:
        """Make and queue the `count` tasks of `spec`'s array; their jobs, by index."""
        size = len(spec.params_yaml) * count
        cap, planned = await self._offload.run(size, "params", plan_tasks, spec, pool)
        if refuse_never_runs:
            for plan in {p[2].shape: p[2] for p in planned}.values():
                await self._queues.check_can_run(queue, plan)
        array_id = new_job_id()
        groups = by.groups if by is not None else ()
        news = await self._blocking(self._new_jobs, array_id, cap, planned, user, by, groups)
        view = self._ctx.backlog
        for new in news:
            view.expect(new.job_id)
        try:
            jobs: list[Job] = await self._ctx.db(
                self._ctx.store.create_jobs, news, self._ctx.clock()
            )
        except BaseException:
            for new in news:
                view.enter(new.job_id, None)
            raise
        for new, job in zip(news, jobs, strict=True):
            task = new.spec
            view.enter(
                job.id,
                QueuedJob(
                    job.id,
                    task.priority,
                    job.created_at,
                    new.plan,
                    task.queue,
                    user,
                    groups,
                    hold=new.hold,
                    run_limit=task.time_limit_seconds,
                ),
            )
            self._ctx.metrics.submitted(door)
            self._ctx.bus.touched(job.id)
        self._ctx.bus.wake_scheduler()
        return jobs

    def _new_jobs(
        self,
        array_id: str,
        cap: int,
        planned: list[_Planned],
        user: str,
        by: Principal | None,
        groups: tuple[str, ...],
    ) -> list[NewJob]:
        """Each task placed (data dirs, model dir, checkpoint) as its NewJob (blocking)."""
        news = []
        for task, task_spec, plan, resume, warnings in planned:
            job_id = task_id(array_id, task.index)
            choose = self._chooses_checkpoints and (
                task_spec.mode is Mode.EVAL or bool(task_spec.model_dir)
            )
            placed = self._place(task_spec, resume, user, job_id, by, choose)
            member = TaskOf(array_id, task.index, cap, dict(task.overrides))
            hold = hold_by(by, user) if task_spec.hold else None  # submitted held (sbatch -H)
            news.append(
                NewJob(job_id, user, placed, plan, 0.0, "", groups, warnings, member, hold=hold)
            )
        return news
