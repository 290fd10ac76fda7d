"""The coordinator's Prometheus metrics: what every door counts, kept in one place.

Counters and histograms are bumped where the thing happens, whichever door asked for it: a
submit in JobService.submit (labelled with its door), a phase change in Context's one front
door for phase changes, a requeue where one is asked for, a scheduler pass in its loop, a
replica failure where the reconciler acts on it; a gRPC call in one interceptor
(server/grpc/metrics.py), an HTTP request in one middleware (server/rest/metrics.py). None of
them reads the store: a bump is a dict lookup and an add, cheap on the hot paths (a scheduler
pass, a replica's exit). What *is* (jobs by phase, the queue by queue and priority, the
pool's nodes) is read from the store when Prometheus scrapes (services/metrics_scrape.py).

Each coordinator has its own registry: several may live in one test process.
"""

from __future__ import annotations

from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from appliance.domain.job import JobEvent
from appliance.domain.phases import TERMINAL, Phase
from appliance.domain.plan import Role

# "internal": a use case called in process (tests, the simulator), not through a door.
Door = Literal["grpc", "rest", "internal"]
DOORS: tuple[Door, ...] = ("grpc", "rest", "internal")

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
PASS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
WAIT_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0)
ROLES = frozenset(role.value for role in Role)
LIMITS = ("streams", "requests_per_second", "queued_jobs", "queued_jobs_per_queue")
LIMIT_DOORS = ("grpc", "rest", "web", "internal")


class Metrics:
    """The instruments, and the hooks the services, loops and doors call."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        submitted = Counter(
            "appliance_jobs_submitted",
            "Jobs accepted, by the door they came through (grpc: csctl, the Python client and "
            "launcher; rest: the HTTP API; internal: in process).",
            ["door"],
            registry=r,
        )
        self._submitted = {door: submitted.labels(door=door) for door in DOORS}
        finished = Counter(
            "appliance_jobs_finished",
            "Jobs that reached a final phase, by that phase.",
            ["phase"],
            registry=r,
        )
        self._finished = {phase: finished.labels(phase=phase.value) for phase in TERMINAL}
        requeues = Counter(
            "appliance_job_requeues",
            "Running attempts asked to stop and queue again, by cause (preemption: the "
            "scheduler makes room for another job; restart: a replica failed or its node was "
            "taken away, and the job's restart policy allows another attempt).",
            ["cause"],
            registry=r,
        )
        self._preempted = requeues.labels(cause="preemption")
        self._restarted = requeues.labels(cause="restart")
        failures = Counter(
            "appliance_replica_failures",
            "Replica failures that ended a job's attempt (restarted or failed), by the role "
            "of the replica that failed first.",
            ["role"],
            registry=r,
        )
        self._failures = {role: failures.labels(role=role) for role in (*ROLES, "other")}
        decisions = Counter(
            "appliance_scheduler_decisions",
            "What scheduler passes decided: jobs admitted, running jobs asked to stop for "
            "a head of the queue (preempt), queued jobs cancelled as a dependency broke.",
            ["decision"],
            registry=r,
        )
        self.admissions = decisions.labels(decision="admit")
        self.preemptions = decisions.labels(decision="preempt")
        self.dependency_cancels = decisions.labels(decision="cancel_dependency")
        self.scheduler_pass = Histogram(
            "appliance_scheduler_pass_duration_seconds",
            "Time a scheduler pass took: the queue and the pool read, decided, written.",
            buckets=PASS_BUCKETS,
            registry=r,
        )
        self._to_running = Histogram(
            "appliance_job_time_to_running_seconds",
            "Time from a job's submit (or its last requeue) to RUNNING.",
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.http_latency = Histogram(
            "appliance_http_request_duration_seconds",
            "Time from receiving an HTTP request to starting its response, by route template.",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        # The names and labels of the gRPC ecosystem's server metrics (go-grpc-prometheus).
        self.grpc_handled = Counter(
            "grpc_server_handled",
            "gRPC calls completed on the server, by method and status code.",
            ["grpc_type", "grpc_service", "grpc_method", "grpc_code"],
            registry=r,
        )
        self.grpc_latency = Histogram(
            "grpc_server_handling_seconds",
            "Time a gRPC call took on the server, to its last message (streams: their life).",
            ["grpc_type", "grpc_service", "grpc_method"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        refusals = Counter(
            "appliance_limit_refusals",
            "Calls refused because their user was over a per-user limit (services/limits.py), "
            "by limit (streams, requests_per_second, queued_jobs, queued_jobs_per_queue) and "
            "door (grpc, rest, web).",
            ["limit", "door"],
            registry=r,
        )
        self._refusals = {
            (limit, door): refusals.labels(limit=limit, door=door)
            for limit in LIMITS
            for door in LIMIT_DOORS
        }
        self.streams_open = Gauge(
            "appliance_user_streams_open",
            "Long-lived streams open (watches, followed logs, event streams, dashboard feeds), "
            "every user's; each user's are capped.",
            registry=r,
        )
        # Read at scrape time (services/metrics_scrape.py).
        self.jobs = Gauge("appliance_jobs", "Jobs in the store by phase.", ["phase"], registry=r)
        self.queued = Gauge(
            "appliance_queued_jobs",
            "Jobs waiting to be admitted, by queue and priority.",
            ["queue", "priority"],
            registry=r,
        )
        self.nodes = Gauge(
            "appliance_nodes",
            "Nodes of the pool by kind (system: a CS-2; memoryx; swarmx) and admin-set state "
            "(only ok nodes take new jobs).",
            ["kind", "state"],
            registry=r,
        )
        self.nodes_in_use = Gauge(
            "appliance_nodes_in_use",
            "Nodes of the pool that jobs hold (all or part of), by kind.",
            ["kind"],
            registry=r,
        )
        self.serving = Gauge(
            "appliance_coordinator_serving",
            "1 while this coordinator serves the API (the only one, or the leader); 0 while "
            "it stands by.",
            registry=r,
        )
        self.gc_frozen = Gauge(
            "appliance_gc_frozen_objects",
            "Objects frozen out of the garbage collector's full collections at start "
            "(`appliance serve` freezes its start-up heap; 0 means full collections scan it).",
            registry=r,
        )
        # Jobs admitted and not yet RUNNING: when they entered the queue (submit or requeue).
        self._starting: dict[str, float] = {}
        # Requeued jobs waiting to be admitted again: when they were requeued.
        self._requeued_at: dict[str, float] = {}

    # ---- hooks ------------------------------------------------------------------------------

    def submitted(self, door: Door) -> None:
        self._submitted[door].inc()

    def limit_refused(self, limit: str, door: str) -> None:
        """A call over a per-user limit was refused (a known limit and door, else not counted:
        a series is never made from a caller's words)."""
        counter = self._refusals.get((limit, door))
        if counter is not None:
            counter.inc()

    def requeue_asked(self, *, preemption: bool) -> None:
        (self._preempted if preemption else self._restarted).inc()

    def replica_failed(self, replica: str) -> None:
        """The attempt ended because `replica` (e.g. cs2-1) failed."""
        role = replica.partition("-")[0]
        self._failures[role if role in ROLES else "other"].inc()

    def admitted(self, job_id: str, created_at: float) -> None:
        """The scheduler admitted the job (submitted at `created_at`); its wait ends at
        RUNNING. A requeued job waits from its requeue."""
        self._starting[job_id] = self._requeued_at.pop(job_id, created_at)

    def forget_starts(self) -> None:
        """The scheduler starts (e.g. on taking office): waits seen by an earlier term are
        not followed."""
        self._starting.clear()
        self._requeued_at.clear()

    def phase_changed(self, event: JobEvent) -> None:
        """Every phase change applied (Context announces each)."""
        to = event.to_phase
        if to is Phase.RUNNING:
            since = self._starting.pop(event.job_id, None)
            if since is not None:
                self._to_running.observe(max(0.0, event.time - since))
        elif to is Phase.QUEUED:
            self._starting.pop(event.job_id, None)
            self._requeued_at[event.job_id] = event.time
        elif to is not None and to.terminal:
            self._finished[to].inc()
            self._starting.pop(event.job_id, None)
            self._requeued_at.pop(event.job_id, None)
