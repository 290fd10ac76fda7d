"""The client's calls about the cluster rather than one job: the pool and its nodes, the
queues, usage accounting, cancelling many jobs at once. A part of ApplianceClient
(appliance/client/client.py)."""

from __future__ import annotations

import dataclasses
import getpass
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from appliance._proto.v1 import cluster_pb2, cluster_pb2_grpc
from appliance.client.nodes import NodeStatus, node_event_from_pb, node_from_pb
from appliance.domain.array_view import ArrayView
from appliance.domain.audit import MAX_PAGE, AuditEvent, AuditQuery
from appliance.domain.bulk_cancel import BulkCancelResult, CancelSelection, parse_phases
from appliance.domain.errors import InvalidSpec
from appliance.domain.inventory import NodeEvent, NodeState
from appliance.domain.limits import LimitsReport
from appliance.domain.phases import Phase
from appliance.domain.queues import QueueStatus
from appliance.domain.selectors import parse_selector
from appliance.domain.spec import validate_labels
from appliance.domain.usage import UsageQuery, UsageRow
from appliance.protocol.arrays import array_view_from_pb
from appliance.protocol.audit import event_from_pb, query_to_pb
from appliance.protocol.cancels import result_from_pb, selection_to_pb
from appliance.protocol.limits import limits_from_pb
from appliance.protocol.queues import queue_from_pb, usage_from_pb

_T = TypeVar("_T")


class ClusterCalls:
    """Calls on the pool, the queues, usage and many jobs at once; ApplianceClient provides
    `_stub` and `_call`."""

    _stub: cluster_pb2_grpc.ClusterServiceStub

    def _call(self, method: Callable[..., _T], request: object) -> _T:
        raise NotImplementedError

    def cancel_jobs(
        self,
        *,
        mine: bool = False,
        user: str | None = None,
        labels: Mapping[str, str] | None = None,
        phases: Iterable[str | Phase] = (),
        job_ids: Iterable[str] = (),
        all: bool = False,
        reason: str = "",
        selector: str = "",
    ) -> BulkCancelResult:
        """Cancel many jobs in one request, as `scancel -u` does: every active job of a
        selection, or the jobs named by `job_ids` (not both). A selection says whose jobs or
        which (`mine`, `user`, `labels`), or is `all` (every user's: admins); `phases` (e.g.
        ["QUEUED"]) only narrows it; `selector` is a label selector as kubectl writes it
        (`team in (nlp,cv),!tmp`), with `labels` a part of the selection. `mine`: the
        caller's jobs, its token's user with authentication on, else this process's user
        name. Jobs the caller may not cancel are left as they are and counted as refused. A
        selection larger than one call's bound is gone through call by call; the result adds
        the calls up."""
        selection = CancelSelection(
            user=os_user() if mine else user or "",
            mine=mine,
            labels=validate_labels(labels or {}),
            phases=parse_phases(phases),
            job_ids=tuple(job_ids),
            all=all,
            reason=reason,
            selector=parse_selector(selector, field="selector"),
        )
        request = selection_to_pb(selection)
        result = result_from_pb(self._call(self._stub.CancelJobs, request))
        while result.next_page_token:
            request.page_token = result.next_page_token
            result = result.merged(result_from_pb(self._call(self._stub.CancelJobs, request)))
        return result

    def nodes(self) -> list[NodeStatus]:
        """The pool: every CS-2 system, MemoryX and SwarmX node with its state and holders."""
        response = self._call(self._stub.ListNodes, cluster_pb2.ListNodesRequest())
        return [node_from_pb(node) for node in response.nodes]

    def set_node_state(self, name: str, state: str | NodeState, reason: str = "") -> NodeStatus:
        """Admins: drain a node (`drain`), take it from its jobs (`error`, `maintenance`: each
        is requeued from its checkpoint or failed, by its restart policy), or put it back
        (`ok`). Returns the node as it now is."""
        request = cluster_pb2.SetNodeStateRequest(name=name, state=str(state), reason=reason)
        return node_from_pb(self._call(self._stub.SetNodeState, request))

    def node_events(self, name: str) -> list[NodeEvent]:
        """The node's state changes (when, which state, why, by whom), first first."""
        request = cluster_pb2.GetNodeEventsRequest(name=name)
        response = self._call(self._stub.GetNodeEvents, request)
        return [node_event_from_pb(e) for e in response.events]

    def limits(self, user: str = "") -> LimitsReport:
        """The caller's per-user limits (streams, request rate, queued jobs) and what they use
        of them now; admins may name another `user`."""
        request = cluster_pb2.GetLimitsRequest(user=user)
        return limits_from_pb(self._call(self._stub.GetLimits, request))

    def array(self, array_id: str) -> ArrayView:
        """An array's tasks (`wsjob-…`, the id its tasks' ids start with): each one's index,
        sweep overrides, phase, reason and final loss and evaluation."""
        request = cluster_pb2.GetArrayRequest(array_id=array_id)
        return array_view_from_pb(self._call(self._stub.GetArray, request))

    def queues(self) -> list[QueueStatus]:
        """Every queue: quota, what it holds, borrows and lends, its jobs and fair share."""
        response = self._call(self._stub.ListQueues, cluster_pb2.ListQueuesRequest())
        return [queue_from_pb(q) for q in response.queues]

    def set_queue(
        self,
        name: str,
        *,
        systems: int | None = None,
        memoryx: int | str | None = None,
        weight: float | None = None,
        borrow_systems: int | str | None = None,
        borrow_memoryx: int | str | None = None,
        lend: bool | None = None,
        groups: Iterable[str] | None = None,
        max_running_jobs_per_user: int | str | None = None,
        max_queued_jobs_per_user: int | str | None = None,
        max_systems_per_user: int | str | None = None,
        default_time_limit: int | str | None = None,
        max_time_limit: int | str | None = None,
    ) -> QueueStatus:
        """Admins: create the queue, or change the fields given (None: kept). Sizes are bytes
        or text such as "32GiB"; a borrowing limit of "unlimited" removes the limit, and so
        does "unlimited" for a cap per user (admitted jobs, jobs waiting, systems held). Time
        limits are seconds or text as Slurm writes them ("2:00:00", "1-00:00:00"), or
        "unlimited"."""
        fields: dict[str, Any] = {"name": name}
        if systems is not None:
            fields["systems"] = systems
        if weight is not None:
            fields["weight"] = weight
        if lend is not None:
            fields["lend"] = lend
        for key, value in (
            ("memoryx", memoryx), ("borrow_systems", borrow_systems),
            ("borrow_memoryx", borrow_memoryx),
            ("max_running_jobs_per_user", max_running_jobs_per_user),
            ("max_queued_jobs_per_user", max_queued_jobs_per_user),
            ("max_systems_per_user", max_systems_per_user),
            ("default_time_limit", default_time_limit), ("max_time_limit", max_time_limit),
        ):  # fmt: skip
            if value is not None:
                fields[key] = str(value)
        request = cluster_pb2.SetQueueRequest(**fields)
        if groups is not None:
            request.groups.extend(groups)
            request.set_groups = True
        return queue_from_pb(self._call(self._stub.SetQueue, request))

    def delete_queue(self, name: str) -> None:
        """Admins: delete a queue no job waits or runs in."""
        self._call(self._stub.DeleteQueue, cluster_pb2.DeleteQueueRequest(name=name))

    def usage(
        self, *, since: float = 0.0, until: float = 0.0, by: str = "user"
    ) -> tuple[UsageQuery, list[UsageRow]]:
        """Usage per user, group or queue over [since, until] (Unix times; 0: 30 days back,
        and now): system-hours, MemoryX GiB-hours, jobs by final phase, queue waits,
        preemptions and restarts."""
        request = cluster_pb2.GetUsageRequest(since=since, until=until, by=by)
        return usage_from_pb(self._call(self._stub.GetUsage, request))

    def audit_events(
        self, *, since: float = 0.0, user: str = "", verb: str = "", limit: int = 100
    ) -> list[AuditEvent]:
        """Admins: the audit log, newest first, at most `limit` events (pages of up to
        1000 are fetched until then): every mutating call and every refusal at every door.
        `since` is Unix seconds (0: from the oldest kept)."""
        query = AuditQuery(since, user, verb, min(limit, MAX_PAGE)).checked()
        events: list[AuditEvent] = []
        while True:
            response = self._call(self._stub.ListAuditEvents, query_to_pb(query))
            events += [event_from_pb(e) for e in response.events]
            left = limit - len(events)
            if left <= 0 or not response.next_page_token:
                return events[:limit]
            before = int(response.next_page_token)
            query = dataclasses.replace(query, limit=min(left, MAX_PAGE), before_id=before)


def os_user() -> str:
    """This process's user name: who a client submits as, and whose jobs `mine` means, while
    the appliance has authentication off."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        raise InvalidSpec(
            "cannot tell the OS user of this process; pass user=... to submit()", field="user"
        ) from None
