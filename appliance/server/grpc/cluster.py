"""ClusterService: what csctl, the client and programs call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import appliance
from appliance._proto.v1 import cluster_pb2, cluster_pb2_grpc
from appliance.domain.arrays import checked_array_id
from appliance.domain.audit import next_token
from appliance.domain.auth import ANONYMOUS_USER, CLAIMED_USER_METADATA_KEY, Principal
from appliance.domain.errors import InvalidSpec
from appliance.domain.inventory import NodeUsage
from appliance.domain.listing import JobQuery
from appliance.domain.queues import USER_CAPS
from appliance.domain.reasons import parse_codes
from appliance.domain.selectors import parse_selector
from appliance.domain.spec import validate_labels
from appliance.domain.spec_document import spec_values
from appliance.protocol import audit, convert
from appliance.protocol.arrays import array_view_to_pb
from appliance.protocol.cancels import result_to_pb, selection_from_pb
from appliance.protocol.limits import limits_to_pb
from appliance.protocol.queues import queue_to_pb, usage_to_pb
from appliance.protocol.reservations import request_fields, reservation_to_pb
from appliance.server.grpc import summaries
from appliance.server.grpc.authn import caller
from appliance.server.grpc.errors import Ctx, stream, unary
from appliance.services.holds import HoldOutcome
from appliance.services.job_controls import check_job_id
from appliance.services.nodes import parse_node_state
from appliance.services.use_cases import UseCases


class ClusterServicer(cluster_pb2_grpc.ClusterServiceServicer):
    """Every method but GetVersion is authenticated before it runs (authn.py); `caller()`
    is who calls."""

    def __init__(self, uses: UseCases) -> None:
        self.jobs = jobs = uses.jobs
        self.logs = uses.logs
        self.nodes = uses.nodes
        self.usage = uses.usage
        self.queues = uses.queues
        self.bulk_cancels = uses.bulk_cancels
        self.job_watch = uses.job_watch
        self.audit = uses.audit
        self.limits = uses.limits
        self.arrays = uses.arrays
        self.holds = uses.holds
        self.reservations = uses.reservations
        self.listing = jobs.listing(summaries.serialized, summaries.MAX_CACHED, summaries.KEEPING)

    @unary
    async def SubmitJob(
        self, request: cluster_pb2.SubmitJobRequest, context: Ctx
    ) -> cluster_pb2.Job:
        by = caller()
        job = await self.jobs.submit(
            await self.jobs.validate(**spec_values(convert.spec_from_pb(request.spec))),
            request.user or ANONYMOUS_USER,
            lease_seconds=request.lease_seconds,
            lease_holder=request.lease_holder,
            by=by,
            door="grpc",
        )
        return convert.job_to_pb(job)

    @unary
    async def GetJob(self, request: cluster_pb2.GetJobRequest, context: Ctx) -> cluster_pb2.Job:
        return convert.job_to_pb(await self.jobs.get(request.job_id, by=caller()))

    @unary
    async def ListJobs(
        self, request: cluster_pb2.ListJobsRequest, context: Ctx
    ) -> cluster_pb2.ListJobsResponse:
        by = caller()
        listed, token = await self.listing.page(query_from_request(request, by))
        parts = summaries.responses(listed, max_bytes=1 << 62)
        response = parts[0] if parts else cluster_pb2.ListJobsResponse()
        response.next_page_token = token
        return response

    @stream
    async def StreamJobs(
        self, request: cluster_pb2.ListJobsRequest, context: Ctx
    ) -> AsyncIterator[cluster_pb2.ListJobsResponse]:
        by = caller()
        async for listed in self.listing.pages(query_from_request(request, by)):
            for response in summaries.responses(listed):
                yield response

    @stream
    async def WatchJobs(
        self, request: cluster_pb2.ListJobsRequest, context: Ctx
    ) -> AsyncIterator[cluster_pb2.WatchJobsResponse]:
        query = query_from_request(request, caller())
        with self.job_watch.watching(query) as changes:  # before listing: nothing is missed
            async for listed in self.listing.pages(query):
                for response in summaries.responses(listed):
                    yield cluster_pb2.WatchJobsResponse(jobs=response.jobs)
            yield cluster_pb2.WatchJobsResponse(listed=True)
            async for jobs in changes:
                yield cluster_pb2.WatchJobsResponse(jobs=[convert.job_to_pb(j) for j in jobs])

    @unary
    async def CancelJob(
        self, request: cluster_pb2.CancelJobRequest, context: Ctx
    ) -> cluster_pb2.CancelJobResponse:
        by = caller()
        job, changed, message = await self.jobs.cancel(request.job_id, request.reason, by=by)
        return cluster_pb2.CancelJobResponse(
            job=convert.job_to_pb(job), changed=changed, message=message
        )

    @unary
    async def CancelJobs(
        self, request: cluster_pb2.CancelJobsRequest, context: Ctx
    ) -> cluster_pb2.CancelJobsResponse:
        result = await self.bulk_cancels.cancel(selection_from_pb(request), by=caller())
        return result_to_pb(result)

    @stream
    async def WatchJob(
        self, request: cluster_pb2.WatchJobRequest, context: Ctx
    ) -> AsyncIterator[cluster_pb2.JobEvent]:
        async for event in self.jobs.watch(request.job_id, request.after_seq):
            yield convert.event_to_pb(event)

    @unary
    async def GetJobEvents(
        self, request: cluster_pb2.GetJobEventsRequest, context: Ctx
    ) -> cluster_pb2.GetJobEventsResponse:
        events = await self.jobs.events(request.job_id)
        return cluster_pb2.GetJobEventsResponse(events=[convert.event_to_pb(e) for e in events])

    @unary
    async def GetVersion(
        self, request: cluster_pb2.GetVersionRequest, context: Ctx
    ) -> cluster_pb2.GetVersionResponse:
        return cluster_pb2.GetVersionResponse(version=appliance.__version__)

    @unary
    async def SetJobPriority(
        self, request: cluster_pb2.SetJobPriorityRequest, context: Ctx
    ) -> cluster_pb2.Job:
        priority = convert.priority_from_pb(request.priority)
        if priority is None:
            raise InvalidSpec("priority must be one of P0, P1, P2, P3", field="priority")
        job = await self.jobs.set_priority(request.job_id, priority, by=caller())
        return convert.job_to_pb(job)

    @unary
    async def UpdateJobLabels(
        self, request: cluster_pb2.UpdateJobLabelsRequest, context: Ctx
    ) -> cluster_pb2.Job:
        job = await self.jobs.update_labels(
            request.job_id, dict(request.set), list(request.remove), by=caller()
        )
        return convert.job_to_pb(job)

    @unary
    async def ListNodes(
        self, request: cluster_pb2.ListNodesRequest, context: Ctx
    ) -> cluster_pb2.ListNodesResponse:
        held = await self.reservations.holding()
        nodes = [
            _node_to_pb(usage, jobs, held.get(usage.node.name, ""))
            for usage, jobs in await self.jobs.nodes()
        ]
        return cluster_pb2.ListNodesResponse(nodes=nodes)

    @unary
    async def SetNodeState(
        self, request: cluster_pb2.SetNodeStateRequest, context: Ctx
    ) -> cluster_pb2.Node:
        state = parse_node_state(request.state)
        node = await self.nodes.set_state(request.name, state, request.reason, by=caller())
        return _node_to_pb(*await self.nodes.status(node.name))

    @unary
    async def GetNodeEvents(
        self, request: cluster_pb2.GetNodeEventsRequest, context: Ctx
    ) -> cluster_pb2.GetNodeEventsResponse:
        events = await self.nodes.events(request.name)
        return cluster_pb2.GetNodeEventsResponse(
            events=[
                cluster_pb2.NodeEvent(
                    node=e.node, time=e.time, state=e.state.value, reason=e.reason, by=e.by
                )
                for e in events
            ]
        )

    @unary
    async def HeartbeatLease(
        self, request: cluster_pb2.HeartbeatLeaseRequest, context: Ctx
    ) -> cluster_pb2.HeartbeatLeaseResponse:
        job = await self.jobs.renew_lease(request.job_id, request.holder, by=caller())
        response = cluster_pb2.HeartbeatLeaseResponse(keep_running=not job.phase.terminal)
        if job.lease is not None:
            response.lease.CopyFrom(convert.lease_to_pb(job.lease))
        return response

    @stream
    async def GetJobLogs(
        self, request: cluster_pb2.GetJobLogsRequest, context: Ctx
    ) -> AsyncIterator[cluster_pb2.LogChunk]:
        check_job_id(request.job_id)
        async for replica, lines in self.logs.read(
            request.job_id, request.replica, request.follow, by=caller()
        ):
            yield cluster_pb2.LogChunk(replica=replica, lines=lines)

    @unary
    async def CompileJob(
        self, request: cluster_pb2.CompileJobRequest, context: Ctx
    ) -> cluster_pb2.CompileReport:
        spec = await self.jobs.validate(**spec_values(convert.spec_from_pb(request.spec)))
        report = await self.jobs.compile(spec)
        return convert.compile_report_to_pb(report)

    @unary
    async def ListQueues(
        self, request: cluster_pb2.ListQueuesRequest, context: Ctx
    ) -> cluster_pb2.ListQueuesResponse:
        statuses = await self.queues.list()
        return cluster_pb2.ListQueuesResponse(queues=[queue_to_pb(q) for q in statuses])

    @unary
    async def SetQueue(
        self, request: cluster_pb2.SetQueueRequest, context: Ctx
    ) -> cluster_pb2.Queue:
        fields: dict[str, Any] = {
            name: getattr(request, name)
            for name in _QUEUE_FIELDS
            if request.HasField(name)  # type: ignore[arg-type]
        }
        if request.set_groups:
            fields["groups"] = list(request.groups)
        spec = await self.queues.set(request.name, fields, by=caller())
        return queue_to_pb(await self.queues.status(spec.name))

    @unary
    async def DeleteQueue(
        self, request: cluster_pb2.DeleteQueueRequest, context: Ctx
    ) -> cluster_pb2.DeleteQueueResponse:
        await self.queues.delete(request.name, by=caller())
        return cluster_pb2.DeleteQueueResponse()

    @unary
    async def GetUsage(
        self, request: cluster_pb2.GetUsageRequest, context: Ctx
    ) -> cluster_pb2.UsageReport:
        query, rows = await self.usage.report(request.since, request.until, request.by)
        return usage_to_pb(query, rows)

    @unary
    async def ListAuditEvents(
        self, request: cluster_pb2.ListAuditEventsRequest, context: Ctx
    ) -> cluster_pb2.ListAuditEventsResponse:
        query = audit.query_from_pb(request)
        events = await self.audit.list(query, by=caller())
        return cluster_pb2.ListAuditEventsResponse(
            events=[audit.event_to_pb(e) for e in events],
            next_page_token=next_token(query, events),
        )

    async def GetLimits(
        self, request: cluster_pb2.GetLimitsRequest, context: Ctx
    ) -> cluster_pb2.Limits:
        claimed = dict(context.invocation_metadata() or ()).get(CLAIMED_USER_METADATA_KEY)
        return limits_to_pb(await self.limits.report_for(caller(), claimed, request.user))

    # --- Job arrays and sweeps (#37) ---

    @unary
    async def GetArray(
        self, request: cluster_pb2.GetArrayRequest, context: Ctx
    ) -> cluster_pb2.ArrayView:
        return array_view_to_pb(await self.arrays.view(request.array_id, by=caller()))

    # ---- Holds and suspend (#37) ----------------------------------------------------------

    @unary
    async def HoldJob(
        self, request: cluster_pb2.JobHoldRequest, context: Ctx
    ) -> cluster_pb2.JobHoldResponse:
        return _hold_to_pb(await self.holds.hold(request.job_id, by=caller()))

    @unary
    async def ReleaseJob(
        self, request: cluster_pb2.JobHoldRequest, context: Ctx
    ) -> cluster_pb2.JobHoldResponse:
        return _hold_to_pb(await self.holds.release(request.job_id, by=caller()))

    @unary
    async def SuspendJob(
        self, request: cluster_pb2.JobHoldRequest, context: Ctx
    ) -> cluster_pb2.JobHoldResponse:
        return _hold_to_pb(await self.holds.suspend(request.job_id, by=caller()))

    @unary
    async def ResumeJob(
        self, request: cluster_pb2.JobHoldRequest, context: Ctx
    ) -> cluster_pb2.JobHoldResponse:
        return _hold_to_pb(await self.holds.release(request.job_id, by=caller(), resume=True))

    @unary
    async def CreateReservation(
        self, request: cluster_pb2.CreateReservationRequest, context: Ctx
    ) -> cluster_pb2.Reservation:
        made = await self.reservations.create(request_fields(request), by=caller())
        return reservation_to_pb(made, self.reservations.now())

    @unary
    async def ListReservations(
        self, request: cluster_pb2.ListReservationsRequest, context: Ctx
    ) -> cluster_pb2.ListReservationsResponse:
        found, now = await self.reservations.list(), self.reservations.now()
        return cluster_pb2.ListReservationsResponse(
            reservations=[reservation_to_pb(r, now) for r in found]
        )

    @unary
    async def DeleteReservation(
        self, request: cluster_pb2.DeleteReservationRequest, context: Ctx
    ) -> cluster_pb2.DeleteReservationResponse:
        await self.reservations.delete(request.name, by=caller())
        return cluster_pb2.DeleteReservationResponse()


def _hold_to_pb(outcome: HoldOutcome) -> cluster_pb2.JobHoldResponse:
    return cluster_pb2.JobHoldResponse(
        job=convert.job_to_pb(outcome.job), changed=outcome.changed, message=outcome.message
    )


_QUEUE_FIELDS = (
    "systems", "memoryx", "weight", "borrow_systems", "borrow_memoryx", "lend", *USER_CAPS,
    "default_time_limit", "max_time_limit",
)  # fmt: skip


def query_from_request(msg: cluster_pb2.ListJobsRequest, by: Principal | None = None) -> JobQuery:
    return JobQuery(
        include_terminal=msg.all,
        user=by.user if msg.mine and by is not None else msg.user,
        labels=validate_labels(dict(msg.labels)),
        limit=msg.limit,
        page_token=msg.page_token,
        selector=parse_selector(msg.label_selector),
        reasons=parse_codes(msg.reasons),
        array=checked_array_id(msg.array) if msg.array else "",
    )


def _node_to_pb(usage: NodeUsage, jobs: list[str], reservation: str = "") -> cluster_pb2.Node:
    node = usage.node
    return cluster_pb2.Node(
        name=node.name, kind=node.kind.value, state=node.state.value, capacity=node.capacity,
        used=usage.used, jobs=jobs, reason=node.reason, since=node.since,
        reservation=reservation,
    )  # fmt: skip
