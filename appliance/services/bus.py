"""In-process fan-out of job events to watchers, and the wake-up signals of the loops.

Only a notification path: the store stays the source of truth, so a watcher that misses
nothing replays from the store first and then follows the bus.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterator
from contextlib import contextmanager

from appliance.domain.job import JobEvent

QUEUE_LIMIT = 1024


class JobBus:
    def __init__(self) -> None:
        self._subscribers: dict[str, set[asyncio.Queue[JobEvent]]] = collections.defaultdict(set)
        self.schedule_wanted = asyncio.Event()
        self.reconcile_wanted = asyncio.Event()
        self._every_job: set[ChangedJobs] = set()  # watchers of every job (kubectl get -w)
        # Watchers of any change a list shows (a phase, a priority, labels, a node's state).
        self._changes: set[asyncio.Event] = set()

    def publish(self, event: JobEvent) -> None:
        for queue in list(self._subscribers.get(event.job_id, ())):
            if queue.full():  # a slow watcher loses progress events, never phase events
                _drop_oldest_progress(queue)
            queue.put_nowait(event)
        if event.progress is None:
            self._touch(event.job_id, event.to_phase is not None and event.to_phase.terminal)

    def touched(self, job_id: str) -> None:
        """The job changed in what a list shows with no phase event (it was submitted, its
        priority or labels changed): watchers of every job hear of it."""
        self._touch(job_id, False)

    def _touch(self, job_id: str, ended: bool) -> None:
        for changed in self._every_job:
            changed.add(job_id, ended)
        self.changed()

    def changed(self) -> None:
        """Something a list of jobs or nodes shows changed (jobs' changes say so themselves)."""
        for flag in self._changes:
            flag.set()

    @contextmanager
    def every_job(self) -> Iterator[ChangedJobs]:
        """The ids of the jobs that change from now on, for as long as the context lasts."""
        changed = ChangedJobs()
        self._every_job.add(changed)
        try:
            yield changed
        finally:
            self._every_job.discard(changed)

    @contextmanager
    def changes(self) -> Iterator[asyncio.Event]:
        """An event set on every change (clear it before reading what changed)."""
        flag = asyncio.Event()
        self._changes.add(flag)
        try:
            yield flag
        finally:
            self._changes.discard(flag)

    @contextmanager
    def subscribe(self, job_id: str) -> Iterator[asyncio.Queue[JobEvent]]:
        queue: asyncio.Queue[JobEvent] = asyncio.Queue(maxsize=QUEUE_LIMIT + 1)
        self._subscribers[job_id].add(queue)
        try:
            yield queue
        finally:
            subscribers = self._subscribers.get(job_id)
            if subscribers is not None:
                subscribers.discard(queue)
                if not subscribers:
                    del self._subscribers[job_id]

    def wake_scheduler(self) -> None:
        self.schedule_wanted.set()

    def wake_reconciler(self) -> None:
        self.reconcile_wanted.set()


class ChangedJobs:
    """The jobs that changed since the watcher last took them (at most one entry per job, so
    a slow watcher holds no backlog), and whether a change was the job's end."""

    def __init__(self) -> None:
        self._ids: dict[str, bool] = {}
        self.ready = asyncio.Event()

    def add(self, job_id: str, ended: bool) -> None:
        self._ids[job_id] = self._ids.get(job_id, False) or ended
        self.ready.set()

    def take(self) -> dict[str, bool]:
        """The changed jobs in the order they first changed (job id -> it ended), emptied."""
        taken, self._ids = self._ids, {}
        self.ready.clear()
        return taken


def _drop_oldest_progress(queue: asyncio.Queue[JobEvent]) -> None:
    kept = []
    dropped = False
    while not queue.empty():
        event = queue.get_nowait()
        if not dropped and event.progress is not None:
            dropped = True
            continue
        kept.append(event)
    for event in kept[-QUEUE_LIMIT:]:
        queue.put_nowait(event)
