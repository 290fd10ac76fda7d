"""The queue in memory: queued jobs in queue order, by queue and by plan shape.

The scheduler decides on this index instead of reading and sorting the whole queue on every
pass; the doors read a job's queue position from it. Queue order is (priority, submit time,
id); a position counts the jobs ahead in the job's own queue. Jobs of one queue with the
same plan shape are also kept in order by shape, so that admission can jump to the next job
of a shape that fits instead of walking every job between (scheduler/admission.py).

The index holds no truth of its own: it is rebuilt from the store, and kept current by
re-reading the jobs whose queue entry may have changed (services/backlog_view.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from sortedcontainers import SortedDict, SortedList

from appliance.domain.backlog import QueuedJob
from appliance.domain.plan import PlanShape

Order = tuple[int, float, str]


class BacklogIndex:
    def __init__(self, jobs: Iterable[QueuedJob] = ()) -> None:
        self._jobs: dict[str, QueuedJob] = {job.job_id: job for job in jobs}
        # The held jobs (domain/holds.py): admission steps over them, kept apart so that a
        # pass finds them without walking the queue.
        self._held: dict[str, QueuedJob] = {
            job.job_id: job for job in self._jobs.values() if job.hold is not None
        }
        self._queues: dict[str, SortedDict[Order, QueuedJob]] = {}  # queue -> {order: job}
        self._shapes: dict[
            str, dict[PlanShape, SortedList[Order]]
        ] = {}  # queue -> shape -> orders
        # Built a queue at a time, each sorted once (100,000 jobs put one by one took seconds).
        by_queue: dict[str, list[tuple[Order, QueuedJob]]] = {}
        for job in self._jobs.values():
            by_queue.setdefault(job.queue, []).append((job.order, job))
        for queue, entries in by_queue.items():
            self._queues[queue] = SortedDict(entries)
            shapes: dict[PlanShape, list[Order]] = {}
            for order, job in entries:  # one order tuple per job, shared by both
                shapes.setdefault(job.plan.shape, []).append(order)
            self._shapes[queue] = {shape: SortedList(orders) for shape, orders in shapes.items()}

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def get(self, job_id: str) -> QueuedJob | None:
        return self._jobs.get(job_id)

    def job_ids(self) -> list[str]:
        """Every job in the index, in no particular order."""
        return list(self._jobs)

    def put(self, job: QueuedJob) -> None:
        """Add the job, or move it to its new place (its priority changed), or change its
        entry in place (its hold changed)."""
        order = job.order
        old = self._jobs.get(job.job_id)
        if old is not None and old.order == order and old.queue == job.queue:
            self._jobs[job.job_id] = job
            self._queues[job.queue][order] = job
        else:
            if old is not None:
                self.remove(job.job_id)
            self._add(job)
        if job.hold is not None:
            self._held[job.job_id] = job
        else:
            self._held.pop(job.job_id, None)

    def _add(self, job: QueuedJob) -> None:
        order = job.order
        self._jobs[job.job_id] = job
        jobs = self._queues.get(job.queue)
        if jobs is None:
            jobs = self._queues[job.queue] = SortedDict()
            self._shapes[job.queue] = {}
        jobs[order] = job
        shapes = self._shapes[job.queue]
        orders = shapes.get(job.plan.shape)
        if orders is None:
            orders = shapes[job.plan.shape] = SortedList()
        orders.add(order)

    def held(self) -> list[QueuedJob]:
        """The held jobs, in no particular order."""
        return list(self._held.values())

    def remove(self, job_id: str) -> None:
        self._held.pop(job_id, None)
        job = self._jobs.pop(job_id, None)
        if job is None:
            return
        jobs = self._queues[job.queue]
        del jobs[job.order]
        shapes = self._shapes[job.queue]
        orders = shapes[job.plan.shape]
        orders.remove(job.order)
        if not orders:
            del shapes[job.plan.shape]
        if not jobs:
            del self._queues[job.queue]
            del self._shapes[job.queue]

    def count(self, queue: str) -> int:
        return len(self._queues.get(queue, ()))

    def queues(self) -> list[str]:
        return list(self._queues)

    def in_order(self, queue: str, after: Order | None = None) -> Iterator[QueuedJob]:
        """The queue's jobs in queue order (those after `after` only, when given)."""
        jobs = self._queues.get(queue)
        if jobs is None:
            return iter(())
        if after is None:
            return iter(jobs.values())
        start = jobs.bisect_right(after)
        return (jobs[key] for key in jobs.islice(start))

    def shapes(self, queue: str) -> list[PlanShape]:
        return list(self._shapes.get(queue, ()))

    def next_of_shape(self, queue: str, shape: PlanShape, after: Order | None) -> Order | None:
        """The order of the queue's first job of `shape` after `after` (None: none left)."""
        orders = self._shapes.get(queue, {}).get(shape)
        if not orders:
            return None
        index = 0 if after is None else orders.bisect_right(after)
        return orders[index] if index < len(orders) else None

    def at(self, queue: str, order: Order) -> QueuedJob:
        job: QueuedJob = self._queues[queue][order]
        return job

    def position(self, job_id: str) -> int:
        """1 + the jobs ahead of it in its queue; 0 when it is not queued."""
        job = self._jobs.get(job_id)
        if job is None:
            return 0
        return int(self._queues[job.queue].index(job.order)) + 1
