"""Prometheus metrics of the coordinator's HTTP door, served at /metrics.

Each app has its own registry (several coordinators may live in one test process). Jobs by
phase are read from the store at scrape time with one GROUP BY on the indexed phase column.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from appliance.domain.phases import Phase

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class RestMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.submitted = Counter(
            "appliance_jobs_submitted",
            "Jobs accepted through the REST API.",
            registry=self.registry,
        )
        self.jobs = Gauge(
            "appliance_jobs",
            "Jobs in the store by phase (read at scrape time).",
            ["phase"],
            registry=self.registry,
        )
        self.frozen = Gauge(
            "appliance_gc_frozen_objects",
            "Objects frozen out of the garbage collector's full collections at start "
            "(`appliance serve` freezes its start-up heap; 0 means full collections scan it).",
            registry=self.registry,
        )
        self.latency = Histogram(
            "appliance_http_request_duration_seconds",
            "Time from receiving an HTTP request to starting its response.",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def render(self, phase_counts: dict[Phase, int]) -> bytes:
        for phase in Phase:
            self.jobs.labels(phase=phase.value).set(phase_counts.get(phase, 0))
        self.frozen.set(gc.get_freeze_count())
        return generate_latest(self.registry)

    content_type = CONTENT_TYPE_LATEST


class LatencyMiddleware:
    """Pure ASGI middleware (no per-request task, streaming untouched): observes each HTTP
    request under its route template, so /api/v1/jobs/{job_id} is one series, not one per id."""

    def __init__(self, app: ASGIApp, metrics: RestMetrics, clock: Callable[[], float]) -> None:
        self.app = app
        self.metrics = metrics
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = self.clock()

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                route = scope.get("route")
                template = getattr(route, "path", None) or "unmatched"
                self.metrics.latency.labels(
                    method=scope["method"], route=template, status=str(message["status"])
                ).observe(self.clock() - started)
            await send(message)

        await self.app(scope, receive, timed_send)
