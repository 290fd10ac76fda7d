"""The feed of changes a list shows: phase events and announced writes set it, progress does
not (a running job's reports would refresh every list page), and a watcher that leaves is
forgotten."""

from __future__ import annotations

import asyncio

from appliance.domain.job import EventKind, JobEvent, Progress
from appliance.domain.phases import Phase
from appliance.services.bus import JobBus


async def test_phase_events_and_announced_writes_set_the_feed_progress_does_not() -> None:
    bus = JobBus()
    with bus.changes() as changed:
        bus.publish(JobEvent("wsjob-a", EventKind.PROGRESS, 1.0, progress=Progress(step=1)))
        assert not changed.is_set()
        bus.publish(JobEvent("wsjob-a", EventKind.PHASE, 2.0, 1, Phase.QUEUED, Phase.SCHEDULED))
        assert changed.is_set()
        changed.clear()
        bus.changed()  # a new priority, labels, a node's state
        assert changed.is_set()
    changed.clear()
    bus.changed()
    assert not changed.is_set()  # it left: nothing holds its flag


async def test_every_watcher_is_told() -> None:
    bus = JobBus()
    with bus.changes() as first, bus.changes() as second:
        bus.changed()
        await asyncio.wait_for(asyncio.gather(first.wait(), second.wait()), 1)
