"""A Prometheus scrape: the gauges of what is now, read from the store in one trip to a reader
thread (jobs by phase with one GROUP BY on the indexed phase column, the queue by queue and
priority, the pool with what jobs hold), then the whole registry rendered.

A standby reads them too: the store is shared, so any coordinator reports the same jobs.
"""

from __future__ import annotations

import dataclasses
import gc

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from appliance.domain.inventory import NodeKind, NodeState, NodeUsage
from appliance.domain.phases import Phase
from appliance.domain.queues import DEFAULT_QUEUE
from appliance.domain.spec import Priority
from appliance.services.context import Context
from appliance.services.metrics import Metrics
from appliance.store.jobs import JobStore


@dataclasses.dataclass(frozen=True)
class _Now:
    phases: dict[Phase, int]
    queued: dict[tuple[str, Priority], int]
    usage: list[NodeUsage]


def _read_now(store: JobStore) -> _Now:
    return _Now(store.count_by_phase(), store.queued_counts(), store.pool_usage())


class MetricsScrape:
    """What /metrics answers."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    @property
    def metrics(self) -> Metrics:
        """The instruments the doors bump (their call and request counts)."""
        return self.ctx.metrics

    async def render(self) -> bytes:
        """The text exposition of every metric, its gauges read now."""
        now = await self.ctx.read(_read_now, self.ctx.store)
        m = self.ctx.metrics
        for phase in Phase:
            m.jobs.labels(phase=phase.value).set(now.phases.get(phase, 0))
        m.queued.clear()  # a queue gone, or a priority no longer waited at, is no series
        for priority in Priority:  # every priority of the default queue, even at zero
            m.queued.labels(queue=DEFAULT_QUEUE, priority=priority.name)
        for (queue, priority), count in now.queued.items():
            m.queued.labels(queue=queue, priority=priority.name).set(count)
        m.nodes.clear()
        for kind in NodeKind:
            m.nodes_in_use.labels(kind=kind.value).set(0)
            m.nodes.labels(kind=kind.value, state=NodeState.OK.value)
        for usage in now.usage:
            node = usage.node
            m.nodes.labels(kind=node.kind.value, state=node.state.value).inc()
            if usage.used:
                m.nodes_in_use.labels(kind=node.kind.value).inc()
        m.serving.set(1 if self.ctx.leadership.problem() is None else 0)
        m.gc_frozen.set(gc.get_freeze_count())
        return generate_latest(m.registry)
