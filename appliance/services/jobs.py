"""Job use cases: submit, read, cancel, events, watch (listing: services/listing.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from appliance.domain.array_specs import is_array, task_count
from appliance.domain.auth import (
    Principal,
    check_may_submit,
    may_act_on,
)
from appliance.domain.backlog import QueuedJob
from appliance.domain.bounded_yaml import check_nesting
from appliance.domain.compile import CompileReport, compile_job
from appliance.domain.curves import Curves
from appliance.domain.errors import InvalidSpec
from appliance.domain.holds import hold_by
from appliance.domain.ids import new_job_id
from appliance.domain.inventory import Node, NodeUsage
from appliance.domain.job import Job, JobEvent, without_details
from appliance.domain.params_keys import notes_of
from appliance.domain.plan import Pool, PoolShape, ReplicaPlan, plan_replicas, pool_shape
from appliance.domain.queues import QueueSpec
from appliance.domain.reasons import Reason
from appliance.domain.spec import (
    MAX_HOLDER,
    JobSpec,
    Mode,
    checkpoint_path_of,
    validate_spec,
    validate_text,
    validate_user,
    with_time_limit,
)
from appliance.domain.time_limits import limit_in_queue
from appliance.services.array_submits import ArraySubmits
from appliance.services.arrays import ArrayService
from appliance.services.batching import SubmitBatcher
from appliance.services.cancels import CancelBatcher
from appliance.services.checkpoint_choice import choose_checkpoint
from appliance.services.context import Context
from appliance.services.data_dirs import DataDirs
from appliance.services.job_controls import JobControls, check_job_id
from appliance.services.job_curves import read_curves
from appliance.services.job_views import JobViewCache
from appliance.services.kept_renderings import Keeping
from appliance.services.limits import Limits
from appliance.services.listing import JobListing
from appliance.services.metrics import Door
from appliance.services.model_dirs import ModelDirs
from appliance.services.offload import Offload
from appliance.services.queues import QueueService
from appliance.store.jobs import NewJob

MAX_LEASE_SECONDS = 86_400.0
CHANGES_SETTLE_SECONDS = 0.2

T = TypeVar("T")
# Runs a blocking call off the event loop (asyncio.to_thread's shape).
Blocking = Callable[..., Awaitable[Any]]


def plan_submission(
    spec: JobSpec, pool: Pool
) -> tuple[ReplicaPlan, str | None, tuple[Reason, ...]]:
    """The job's replicas, the checkpoint it resumes from and the warnings its params give
    (keys accepted but not used): one parse of the params."""
    notes = notes_of(spec.params, spec.model_dir)
    return plan_replicas(spec, pool), checkpoint_path_of(spec), tuple(n.reason for n in notes)


class JobService(JobControls):
    def __init__(
        self,
        ctx: Context,
        model_dirs: ModelDirs,
        queues: QueueService | None = None,
        *,
        blocking: Blocking = asyncio.to_thread,
        chooses_checkpoints: bool = True,
        data_dirs: DataDirs | None = None,
        limits: Limits | None = None,
    ) -> None:
        """`model_dirs`: where submits place the jobs' model dirs; `queues`: the queue use cases
        a submit is checked against; `blocking`: how a call that touches the disk is run off
        the event loop (a thread; inline on a virtual clock, which must not wait on threads);
        `chooses_checkpoints`: whether a submit chooses the checkpoint a job starts from
        (services/checkpoint_choice.py: the backend's replicas write model dirs seen here);
        `data_dirs`: how a submit checks the data sets a job reads (default: under the model
        dirs' owners' directories only, not checked on disk); `limits`: the per-user caps a
        submit is checked against (jobs waiting to run; None: none)."""
        self._ctx = ctx
        self._batcher = SubmitBatcher(ctx)
        self._cancels = CancelBatcher(ctx)
        self._views = JobViewCache()
        self._offload = Offload()
        self._shape: tuple[list[Node], PoolShape] | None = None  # the kept pool's shape
        self._blocking = blocking
        self.model_dirs = model_dirs
        self.data_dirs = data_dirs or DataDirs(model_dirs, shared=False)
        self._chooses_checkpoints = chooses_checkpoints
        self._queues = queues or QueueService(ctx)
        self._limits = limits
        self.arrays = ArrayService(ctx, blocking)  # reading arrays, resolving their ids
        self._arrays = ArraySubmits(
            ctx,
            self._queues,
            self._offload,
            blocking,
            self._place,
            chooses_checkpoints=chooses_checkpoints,
        )

    async def submit(
        self,
        spec: JobSpec,
        user: str,
        lease_seconds: float = 0.0,
        lease_holder: str = "",
        *,
        by: Principal | None = None,
        door: Door = "internal",
        refuse_never_runs: bool = True,
    ) -> Job:
        """Plan against the pool (rejecting what can never fit), persist QUEUED, wake the queue.

        With `lease_seconds` the job is cancelled when its client stops heartbeating. `by` is
        the authenticated caller (None: authentication is off); the job belongs to them.
        `door`: where the submit came in, as the metrics count it. `refuse_never_runs`: refuse
        a job its queue's limits can never let run (a simulation keeps it queued instead, to
        count it apart).
        """
        if spec.mode is Mode.COMPILE:
            raise InvalidSpec(
                "mode compile does not run a job: ask for a compile report instead "
                "(python -m appliance.run --mode compile ..., or ApplianceClient.compile)",
                field="mode",
            )
        if by is not None:
            check_may_submit(by, spec)
            user = by.user
        validate_user(user)
        groups = by.groups if by is not None else ()
        queue = await self._queues.check_submit(spec.queue, by)
        count = task_count(spec)  # an array's tasks each count as a job waiting
        limited = (
            self._limits.submitting(
                user, groups, spec.queue, door, count, queue.max_queued_jobs_per_user
            )
            if self._limits is not None
            else contextlib.nullcontext()
        )
        async with limited:  # the user's caps of jobs waiting to run, in all and in the queue
            return await self._submit(
                spec, user, lease_seconds, lease_holder, by, door, queue, refuse_never_runs
            )

    async def _submit(
        self,
        spec: JobSpec,
        user: str,
        lease_seconds: float,
        lease_holder: str,
        by: Principal | None,
        door: Door,
        queue: QueueSpec,
        refuse_never_runs: bool,
    ) -> Job:
        if spec.time_limit or queue.default_time_limit or queue.max_time_limit:
            limit = limit_in_queue(
                spec.time_limit_seconds, queue.name, queue.default_time_limit,
                queue.max_time_limit,
            )  # fmt: skip
            spec = with_time_limit(spec, limit)
        await self._check_dependencies(spec)
        if not 0 <= lease_seconds <= MAX_LEASE_SECONDS:
            raise InvalidSpec(
                f"lease_seconds must be between 0 (detached) and {MAX_LEASE_SECONDS:.0f}",
                field="lease_seconds",
            )
        holder = validate_text(lease_holder, "lease_holder", MAX_HOLDER)
        if is_array(spec):
            if lease_seconds:
                raise InvalidSpec(
                    "lease_seconds: an array is submitted detached (0); follow its tasks with "
                    "`csctl get array`",
                    field="lease_seconds",
                )
            pool, count = await self._pool_shape(), task_count(spec)
            jobs = await self._arrays.submit(
                spec, user, by, queue, pool, count, door=door, refuse_never_runs=refuse_never_runs
            )
            return jobs[0]
        size = len(spec.params_yaml)
        plan, resume, warnings = await self._offload.run(
            size, "params", plan_submission, spec, await self._pool_shape()
        )
        if refuse_never_runs:
            await self._queues.check_can_run(queue, plan)
        job_id = new_job_id()
        choose = self._chooses_checkpoints and (spec.mode is Mode.EVAL or bool(spec.model_dir))
        reads = bool(DataDirs.named(spec))
        if self.model_dirs.needs_disk(spec, resume, user) or choose or reads:  # off the loop
            spec = await self._blocking(self._place, spec, resume, user, job_id, by, choose)
        else:
            spec = self.model_dirs.place(spec, resume, user, job_id, by)
        groups = by.groups if by is not None else ()
        hold = hold_by(by, user) if spec.hold else None  # submitted held (sbatch -H)
        new = NewJob(job_id, user, spec, plan, lease_seconds, holder, groups, warnings, hold=hold)
        view = self._ctx.backlog
        view.expect(job_id)
        try:
            job = await self._batcher.write(new)
        except BaseException:
            view.enter(job_id, None)
            raise
        entry = QueuedJob(
            job.id, spec.priority, job.created_at, plan, spec.queue, user, groups,
            hold=hold, run_limit=spec.time_limit_seconds,
        )  # fmt: skip
        view.enter(job_id, entry)
        self._ctx.metrics.submitted(door)
        self._ctx.bus.wake_scheduler()
        self._ctx.bus.touched(job.id)
        return job

    def _place(
        self,
        spec: JobSpec,
        resume: str | None,
        user: str,
        job_id: str,
        by: Principal | None,
        choose: bool,
    ) -> JobSpec:
        """The data dirs checked (DataDirs.place), the model dir placed (ModelDirs.place),
        then the checkpoint to start from chosen."""
        spec = self.data_dirs.place(spec, user, by)
        spec = self.model_dirs.place(spec, resume, user, job_id, by)
        return choose_checkpoint(spec) if choose else spec

    async def _check_dependencies(self, spec: JobSpec) -> None:
        """Every job the spec depends on exists (so no cycle can ever be made)."""
        ids = [d.job_id for d in spec.depends_on]
        if not ids:
            return
        found = await self._ctx.read(self._ctx.store.existing_jobs, ids)
        missing = [job_id for job_id in ids if job_id not in found]
        if missing:
            tasks = await self.arrays.task_ids_if_array(missing[0])
            raise InvalidSpec(
                f"depends_on names array {missing[0]}; depend on its tasks, e.g. {tasks[0]}"
                if tasks
                else f"depends_on names {missing[0]}, which is not a job; depend only on jobs "
                "that were submitted",
                field="depends_on",
            )

    async def validate(self, **fields: Any) -> JobSpec:
        """validate_spec(**fields), off the event loop when the params are large
        (services/offload.py); raises InvalidSpec naming the field."""
        params = fields.get("params_yaml", "")
        if not isinstance(params, str):  # bounded before anything recurses into it (repr, pickle)
            check_nesting(params, "params")
        size = len(params) if isinstance(params, str) else len(repr(params))  # about its YAML
        return await self._offload.run(size, "params", validate_spec, **fields)

    def close(self) -> None:
        """Stop the checker processes (the coordinator is stopping)."""
        self._offload.close()

    async def compile(self, spec: JobSpec) -> CompileReport:
        """Compile (validate-only) mode: the job's streaming plan, nothing stored or reserved."""
        size = len(spec.params_yaml)
        return await self._offload.run(size, "params", compile_job, spec, await self._pool())

    async def _pool(self) -> list[Node]:
        """The pool's shape, cached in the store: no trip to the store thread on the hot path."""
        pool = self._ctx.store.cached_pool()
        if pool is None:
            pool = await self._ctx.db(self._ctx.store.pool)
        return pool

    async def _pool_shape(self) -> PoolShape:
        """The pool's shape (what planning needs), made once per pool the store keeps."""
        pool = await self._pool()
        made = self._shape
        if made is None or made[0] is not pool:
            made = self._shape = (pool, pool_shape(pool))
        return made[1]

    async def get(self, job_id: str, *, by: Principal | None = None) -> Job:
        """The job's full view, or without its details (params, replicas' addresses, pids and
        log tails) for a caller who may not act on it. A cached view is reused while the job's
        version is unchanged (one small read instead of the row, its replicas and their
        conversion)."""
        check_job_id(job_id)
        store = self._ctx.store
        version, queued = await self._ctx.read(store.job_version, job_id)
        position = await self._ctx.backlog.position(job_id) if queued else 0
        cached = self._views.get(job_id, version, position)
        if cached is not None:
            job = cached
        else:
            job, version = await self._ctx.read(store.get_job_version, job_id)
            self._views.put(job_id, version, job)
        job = await self._ctx.estimates.shown(self._ctx.backlog.shown(job))
        return job if may_act_on(by, job.user, job.groups) else without_details(job)

    async def curves(self, job_id: str) -> Curves:
        """The job's loss, learning-rate and evaluation curves from its first step, as its
        chief wrote them to metrics.jsonl in its model dir (services/job_curves.py): anyone
        who may see the job's progress may see them. None for a job whose model dir the
        coordinator cannot see (a simulated job, a volume it does not mount)."""
        job = await self.get(job_id)
        curves: Curves = await self._blocking(read_curves, job.spec.model_dir, job.id)
        return curves

    def listing(
        self, render: Callable[[Job], T], max_cached: int, keeping: Keeping[T] | None = None
    ) -> JobListing[T]:
        """The list use case for a door that sends summaries rendered by `render` (and keeps
        them in the store across restarts as `keeping` says)."""
        return JobListing(self._ctx, render, max_cached, keeping)

    async def nodes(self) -> list[tuple[NodeUsage, list[str]]]:
        """The pool with what each node holds and for which jobs."""
        usage = await self._ctx.db(self._ctx.store.pool_usage)
        holders = await self._ctx.db(self._ctx.store.node_holders)
        return [(u, holders.get(u.node.name, [])) for u in usage]

    async def events(self, job_id: str) -> list[JobEvent]:
        check_job_id(job_id)
        return await self._ctx.read(self._ctx.store.events, job_id)

    async def changes(self, settle: float = CHANGES_SETTLE_SECONDS) -> AsyncIterator[None]:
        """Yields once after each change a list shows (phases, priorities, labels, nodes'
        states), changes within `settle` seconds of the first coming as one; never ends."""
        with self._ctx.bus.changes() as changed:
            while True:
                await changed.wait()
                await asyncio.sleep(settle)  # a pass that moves many jobs: one refresh
                changed.clear()
                yield None

    async def watch(self, job_id: str, after_seq: int = 0) -> AsyncIterator[JobEvent]:
        """Recorded events after `after_seq`, then live ones, until the job is terminal.

        Phase events always come from the store, in sequence order: a live phase event only
        says "read again", so events published out of order by concurrent writers are neither
        lost nor reordered. Progress events come straight from the bus.
        """
        check_job_id(job_id)
        last_seq = after_seq
        with self._ctx.bus.subscribe(job_id) as live:
            while True:
                for event in await self._ctx.read(self._ctx.store.events, job_id, last_seq):
                    last_seq = event.seq
                    yield event
                    if event.to_phase is not None and event.to_phase.terminal:
                        return
                while True:
                    event = await live.get()
                    if event.progress is None:
                        break  # a phase changed: read the store again
                    yield event
