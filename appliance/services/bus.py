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
        # Watchers of any change a list shows (a phase, a priority, labels, a node's state).
        self._changes: set[asyncio.Event] = set()

    def publish(self, event: JobEvent) -> None:
        for queue in list(self._subscribers.get(event.job_id, ())):
            if queue.full():  # a slow watcher loses progress events, never phase events
                _drop_oldest_progress(queue)
            queue.put_nowait(event)
        if event.progress is None:
            self.changed()

    def changed(self) -> None:
        """Something a list of jobs or nodes shows changed (phase events say so themselves)."""
        for flag in self._changes:
            flag.set()

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
