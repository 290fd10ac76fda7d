"""A test-only ClusterService: jobs in a dict behind a real gRPC server on 127.0.0.1:0.

It sits at our own seam (the gRPC API), so the client and csctl are tested over the wire
without the coordinator. Tests drive it directly: `add_job`, `transition`, `report_progress`,
`break_next_watch_after`, `append_log`, and set `nodes`. Every request is recorded in
`requests`; `heartbeats` counts HeartbeatLease calls per job.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from concurrent import futures

import grpc

from appliance._proto.v1 import cluster_pb2, cluster_pb2_grpc
from appliance.domain.ids import new_job_id
from appliance.domain.inventory import default_pool
from appliance.domain.job import EventKind, Job, JobEvent, Lease, Progress
from appliance.domain.phases import Phase
from appliance.domain.selectors import parse_selector
from appliance.domain.spec import JobSpec
from appliance.protocol import convert
from tests.tls import server_credentials

FAKE_VERSION = "9.9.9-fake"
PARAMS_YAML = "model:\n  name: fc_mnist\n"


class FakeClusterService(cluster_pb2_grpc.ClusterServiceServicer):
    """Holds domain Jobs; converts at the edge like the real servicer."""

    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}
        self.events: dict[str, list[JobEvent]] = {}
        self.requests: list[tuple[str, object]] = []
        self.logs: dict[str, dict[str, list[str]]] = {}
        self.nodes: list[cluster_pb2.Node] = [
            cluster_pb2.Node(
                name=node.name, kind=node.kind.value, state=node.state.value,
                capacity=node.capacity,
            )
            for node in default_pool()
        ]  # fmt: skip
        self.heartbeats: dict[str, int] = {}
        self.reservations: list[cluster_pb2.Reservation] = []
        self._changed = threading.Condition()
        self._break_watch_after: int | None = None
        self._refused_watches = 0

    # -- driven by tests -------------------------------------------------------------------

    def add_job(
        self,
        *,
        phase: Phase = Phase.QUEUED,
        user: str = "alice",
        labels: dict[str, str] | None = None,
        created_at: float | None = None,
        systems: tuple[str, ...] = (),
        **fields: object,
    ) -> Job:
        spec = JobSpec(params_yaml=PARAMS_YAML, num_csx=1, num_steps=10, labels=labels or {})
        now = time.time() if created_at is None else created_at
        job = Job(
            id=new_job_id(),
            user=user,
            spec=spec,
            phase=Phase.QUEUED,
            created_at=now,
            updated_at=now,
            systems=systems,
        )
        job = dataclasses.replace(job, **fields)  # type: ignore[arg-type]
        with self._changed:
            self.jobs[job.id] = job
            self.events[job.id] = []
            self._record_phase(job.id, None, Phase.QUEUED, "submitted")
        if phase is not Phase.QUEUED:
            self.transition(job.id, phase)
        return self.jobs[job.id]

    def transition(self, job_id: str, phase: Phase, reason: str = "") -> None:
        with self._changed:
            job = self.jobs[job_id]
            self.jobs[job_id] = dataclasses.replace(job, phase=phase, reason=reason)
            self._record_phase(job_id, job.phase, phase, reason)

    def report_progress(self, job_id: str, step: int) -> None:
        with self._changed:
            progress = Progress(step=step, num_steps=self.jobs[job_id].spec.num_steps)
            self.jobs[job_id] = dataclasses.replace(self.jobs[job_id], progress=progress)
            event = JobEvent(job_id, EventKind.PROGRESS, time.time(), progress=progress)
            self.events[job_id].append(event)
            self._changed.notify_all()

    def append_log(self, job_id: str, replica: str, *lines: str) -> None:
        with self._changed:
            self.logs.setdefault(job_id, {}).setdefault(replica, []).extend(lines)
            self._changed.notify_all()

    def wait_for_heartbeats(self, job_id: str, count: int, timeout: float = 10.0) -> None:
        """Block until `count` HeartbeatLease calls for the job arrived (AssertionError if not)."""
        with self._changed:
            arrived = self._changed.wait_for(
                lambda: self.heartbeats.get(job_id, 0) >= count, timeout
            )
        assert arrived, f"{self.heartbeats.get(job_id, 0)} of {count} heartbeats for {job_id}"

    def wait_for_request(self, method: str, timeout: float = 10.0) -> None:
        """Block until a `method` request arrived (streams record theirs when they start)."""
        with self._changed:
            arrived = self._changed.wait_for(lambda: bool(self.requests_of(method)), timeout)
        assert arrived, f"no {method} request within {timeout} s"

    def break_next_watch_after(self, count: int) -> None:
        """The next WatchJob call fails with UNAVAILABLE after sending `count` events."""
        self._break_watch_after = count

    def refuse_watches(self, count: int) -> None:
        """The `count` WatchJob calls after the next one fail with UNAVAILABLE at once (the
        coordinator is down for a while)."""
        self._refused_watches = count

    def _record(self, method: str, request: object) -> None:
        with self._changed:
            self.requests.append((method, request))
            self._changed.notify_all()

    def requests_of(self, method: str) -> list[object]:
        return [request for name, request in self.requests if name == method]

    def _record_phase(self, job_id: str, old: Phase | None, new: Phase, reason: str) -> None:
        log = self.events[job_id]
        seq = sum(1 for event in log if event.kind is EventKind.PHASE) + 1
        log.append(JobEvent(job_id, EventKind.PHASE, time.time(), seq, old, new, reason))
        self._changed.notify_all()

    # -- the gRPC API ----------------------------------------------------------------------

    def _job_or_abort(self, job_id: str, context: grpc.ServicerContext) -> Job:
        if job_id not in self.jobs:
            context.abort(grpc.StatusCode.NOT_FOUND, f"job {job_id} not found")
        return self.jobs[job_id]

    def SubmitJob(self, request: cluster_pb2.SubmitJobRequest, context: object) -> object:
        self._record("SubmitJob", request)
        job = self.add_job(user=request.user)
        lease = None
        if request.lease_seconds:
            expires = time.time() + request.lease_seconds
            lease = Lease(request.lease_seconds, expires, request.lease_holder)
        job = dataclasses.replace(job, spec=convert.spec_from_pb(request.spec), lease=lease)
        self.jobs[job.id] = job
        return convert.job_to_pb(job)

    def SetJobPriority(
        self, request: cluster_pb2.SetJobPriorityRequest, context: grpc.ServicerContext
    ) -> object:
        self._record("SetJobPriority", request)
        tasks = [j for j in self.jobs.values() if j.array and j.array.array_id == request.job_id]
        job = tasks[0] if tasks else self._job_or_abort(request.job_id, context)
        if job.phase.terminal:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"job {job.id} is {job.phase}")
        priority = convert.priority_from_pb(request.priority)
        assert priority is not None
        with self._changed:
            spec = dataclasses.replace(job.spec, priority=priority)
            self.jobs[job.id] = dataclasses.replace(job, spec=spec, queue_position=1)
        return convert.job_to_pb(self.jobs[job.id])

    def UpdateJobLabels(
        self, request: cluster_pb2.UpdateJobLabelsRequest, context: grpc.ServicerContext
    ) -> object:
        self._record("UpdateJobLabels", request)
        job = self._job_or_abort(request.job_id, context)
        labels = {**job.spec.labels, **request.set}
        for key in request.remove:
            labels.pop(key, None)
        with self._changed:
            spec = dataclasses.replace(job.spec, labels=labels)
            self.jobs[job.id] = dataclasses.replace(job, spec=spec)
        return convert.job_to_pb(self.jobs[job.id])

    def ListNodes(self, request: cluster_pb2.ListNodesRequest, context: object) -> object:
        self._record("ListNodes", request)
        return cluster_pb2.ListNodesResponse(nodes=self.nodes)

    def CreateReservation(
        self, request: cluster_pb2.CreateReservationRequest, context: object
    ) -> object:
        self._record("CreateReservation", request)
        nodes = list(request.systems) or [
            f"cs2-{i:02d}" for i in range(1, request.system_count + 1)
        ]
        made = cluster_pb2.Reservation(
            name=request.name,
            start=request.start or 1e9,
            end=request.end or 2e9,
            nodes=nodes,
            maint=request.maint,
            users=list(request.users),
            creator="root",
            state="INACTIVE",
        )
        self.reservations.append(made)
        return made

    def ListReservations(
        self, request: cluster_pb2.ListReservationsRequest, context: object
    ) -> object:
        return cluster_pb2.ListReservationsResponse(reservations=self.reservations)

    def HeartbeatLease(
        self, request: cluster_pb2.HeartbeatLeaseRequest, context: grpc.ServicerContext
    ) -> object:
        job = self._job_or_abort(request.job_id, context)
        with self._changed:
            self.heartbeats[job.id] = self.heartbeats.get(job.id, 0) + 1
            self._changed.notify_all()
        return cluster_pb2.HeartbeatLeaseResponse(keep_running=not job.phase.terminal)

    def GetJobLogs(
        self, request: cluster_pb2.GetJobLogsRequest, context: grpc.ServicerContext
    ) -> Iterator[object]:
        """Like the real one: replicas in name order; with follow, until the job is terminal."""
        self._record("GetJobLogs", request)
        self._job_or_abort(request.job_id, context)
        context.add_callback(self._wake_watchers)
        sent: dict[str, int] = {}
        while True:
            with self._changed:
                logs = self.logs.setdefault(request.job_id, {})
                if request.replica and request.replica not in logs:
                    context.abort(grpc.StatusCode.NOT_FOUND, f"no replica {request.replica!r}")
                names = [request.replica] if request.replica else sorted(logs)
                chunks = [(n, logs[n][sent.get(n, 0) :]) for n in names]
                sent.update({n: len(logs[n]) for n in names})
                terminal = self.jobs[request.job_id].phase.terminal
            for name, lines in chunks:
                if lines:
                    yield cluster_pb2.LogChunk(replica=name, lines=lines)
            if not request.follow or terminal:
                return
            self._wait_for_log_news(request.job_id, sent, context)
            if not context.is_active():
                return

    def _wait_for_log_news(
        self, job_id: str, sent: dict[str, int], context: grpc.ServicerContext
    ) -> None:
        logs = self.logs[job_id]
        with self._changed:
            self._changed.wait_for(
                lambda: (
                    not context.is_active()
                    or self.jobs[job_id].phase.terminal
                    or any(len(lines) > sent.get(name, 0) for name, lines in logs.items())
                )
            )

    def GetJob(self, request: cluster_pb2.GetJobRequest, context: grpc.ServicerContext) -> object:
        self._record("GetJob", request)
        return convert.job_to_pb(self._job_or_abort(request.job_id, context))

    def _matching(self, request: cluster_pb2.ListJobsRequest) -> list[Job]:
        jobs = [
            job
            for job in self.jobs.values()
            if (request.all or not job.phase.terminal)
            and (not request.user or job.user == request.user)
            and all(job.spec.labels.get(k) == v for k, v in request.labels.items())
            and parse_selector(request.label_selector).matches(job.spec.labels)
        ]
        return sorted(jobs, key=lambda job: job.created_at, reverse=True)

    def ListJobs(self, request: cluster_pb2.ListJobsRequest, context: object) -> object:
        self._record("ListJobs", request)
        start = int(request.page_token or 0)
        end = start + (request.limit or 1000)
        jobs = self._matching(request)
        token = str(end) if end < len(jobs) else ""
        return cluster_pb2.ListJobsResponse(
            jobs=[convert.job_to_pb(job) for job in jobs[start:end]], next_page_token=token
        )

    def StreamJobs(
        self, request: cluster_pb2.ListJobsRequest, context: object
    ) -> Iterator[object]:
        self._record("StreamJobs", request)
        jobs = self._matching(request)
        size = request.limit or 2
        for start in range(0, len(jobs), size):
            page = [convert.job_to_pb(job) for job in jobs[start : start + size]]
            yield cluster_pb2.ListJobsResponse(jobs=page)

    def CancelJob(
        self, request: cluster_pb2.CancelJobRequest, context: grpc.ServicerContext
    ) -> object:
        self._record("CancelJob", request)
        job = self._job_or_abort(request.job_id, context)
        changed = not job.phase.terminal
        if changed:
            self.transition(job.id, Phase.CANCELLED, request.reason)
        return cluster_pb2.CancelJobResponse(
            job=convert.job_to_pb(self.jobs[job.id]), changed=changed
        )

    def GetJobEvents(
        self, request: cluster_pb2.GetJobEventsRequest, context: grpc.ServicerContext
    ) -> object:
        self._record("GetJobEvents", request)
        self._job_or_abort(request.job_id, context)
        phase_events = [e for e in self.events[request.job_id] if e.kind is EventKind.PHASE]
        return cluster_pb2.GetJobEventsResponse(
            events=[convert.event_to_pb(e) for e in phase_events]
        )

    def GetVersion(self, request: cluster_pb2.GetVersionRequest, context: object) -> object:
        self._record("GetVersion", request)
        return cluster_pb2.GetVersionResponse(version=FAKE_VERSION)

    def WatchJob(
        self, request: cluster_pb2.WatchJobRequest, context: grpc.ServicerContext
    ) -> Iterator[object]:
        self._record("WatchJob", request)
        self._job_or_abort(request.job_id, context)
        context.add_callback(self._wake_watchers)
        break_after, self._break_watch_after = self._break_watch_after, None
        if break_after is None and self._refused_watches > 0:
            self._refused_watches -= 1
            context.abort(grpc.StatusCode.UNAVAILABLE, "coordinator restarting")
        with self._changed:
            log = self.events[request.job_id]
            live_from = len(log)
            pending = [e for e in log if e.kind is EventKind.PHASE and e.seq > request.after_seq]
        sent = 0
        while True:
            for event in pending:
                if break_after is not None and sent == break_after:
                    context.abort(grpc.StatusCode.UNAVAILABLE, "coordinator restarting")
                yield convert.event_to_pb(event)
                sent += 1
                if event.to_phase is not None and event.to_phase.terminal:
                    return
            with self._changed:
                if self.jobs[request.job_id].phase.terminal and len(log) == live_from:
                    return
                self._wait_for_news(log, live_from, context)
                if not context.is_active():
                    return
                pending, live_from = log[live_from:], len(log)

    def _wait_for_news(
        self, log: list[JobEvent], seen: int, context: grpc.ServicerContext
    ) -> None:
        self._changed.wait_for(lambda: len(log) > seen or not context.is_active())

    def _wake_watchers(self) -> None:
        with self._changed:
            self._changed.notify_all()


@dataclasses.dataclass
class FakeCluster:
    """The fake service and the address of the real gRPC server serving it."""

    service: FakeClusterService
    address: str
    server: grpc.Server

    def stop(self) -> None:
        self.server.stop(grace=None).wait()


def serve_fake_cluster() -> FakeCluster:
    service = FakeClusterService()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    cluster_pb2_grpc.add_ClusterServiceServicer_to_server(service, server)
    port = server.add_secure_port("127.0.0.1:0", server_credentials())
    server.start()
    return FakeCluster(service=service, address=f"127.0.0.1:{port}", server=server)
