"""A test-only ClusterService: jobs in a dict behind a real gRPC server on 127.0.0.1:0.

It sits at our own seam (the gRPC API), so the client and csctl are tested over the wire
without the coordinator. Tests drive it directly: `add_job`, `transition`, `report_progress`,
`break_next_watch_after`. Every request is recorded in `requests`.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from concurrent import futures

import grpc

from appliance._proto import convert
from appliance._proto.v1 import cluster_pb2, cluster_pb2_grpc
from appliance.domain.ids import new_job_id
from appliance.domain.job import EventKind, Job, JobEvent, Progress
from appliance.domain.phases import Phase
from appliance.domain.spec import JobSpec

FAKE_VERSION = "9.9.9-fake"
PARAMS_YAML = "model:\n  name: fc_mnist\n"


class FakeClusterService(cluster_pb2_grpc.ClusterServiceServicer):
    """Holds domain Jobs; converts at the edge like the real servicer."""

    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}
        self.events: dict[str, list[JobEvent]] = {}
        self.requests: list[tuple[str, object]] = []
        self._changed = threading.Condition()
        self._break_watch_after: int | None = None

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

    def break_next_watch_after(self, count: int) -> None:
        """The next WatchJob call fails with UNAVAILABLE after sending `count` events."""
        self._break_watch_after = count

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
        self.requests.append(("SubmitJob", request))
        job = self.add_job(user=request.user)
        job = dataclasses.replace(job, spec=convert.spec_from_pb(request.spec))
        self.jobs[job.id] = job
        return convert.job_to_pb(job)

    def GetJob(self, request: cluster_pb2.GetJobRequest, context: grpc.ServicerContext) -> object:
        self.requests.append(("GetJob", request))
        return convert.job_to_pb(self._job_or_abort(request.job_id, context))

    def _matching(self, request: cluster_pb2.ListJobsRequest) -> list[Job]:
        jobs = [
            job
            for job in self.jobs.values()
            if (request.all or not job.phase.terminal)
            and (not request.user or job.user == request.user)
            and all(job.spec.labels.get(k) == v for k, v in request.labels.items())
        ]
        return sorted(jobs, key=lambda job: job.created_at, reverse=True)

    def ListJobs(self, request: cluster_pb2.ListJobsRequest, context: object) -> object:
        self.requests.append(("ListJobs", request))
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
        self.requests.append(("StreamJobs", request))
        jobs = self._matching(request)
        size = request.limit or 2
        for start in range(0, len(jobs), size):
            page = [convert.job_to_pb(job) for job in jobs[start : start + size]]
            yield cluster_pb2.ListJobsResponse(jobs=page)

    def CancelJob(
        self, request: cluster_pb2.CancelJobRequest, context: grpc.ServicerContext
    ) -> object:
        self.requests.append(("CancelJob", request))
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
        self.requests.append(("GetJobEvents", request))
        self._job_or_abort(request.job_id, context)
        phase_events = [e for e in self.events[request.job_id] if e.kind is EventKind.PHASE]
        return cluster_pb2.GetJobEventsResponse(
            events=[convert.event_to_pb(e) for e in phase_events]
        )

    def GetVersion(self, request: cluster_pb2.GetVersionRequest, context: object) -> object:
        self.requests.append(("GetVersion", request))
        return cluster_pb2.GetVersionResponse(version=FAKE_VERSION)

    def WatchJob(
        self, request: cluster_pb2.WatchJobRequest, context: grpc.ServicerContext
    ) -> Iterator[object]:
        self.requests.append(("WatchJob", request))
        self._job_or_abort(request.job_id, context)
        context.add_callback(self._wake_watchers)
        break_after, self._break_watch_after = self._break_watch_after, None
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
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return FakeCluster(service=service, address=f"127.0.0.1:{port}", server=server)
