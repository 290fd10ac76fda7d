"""Conversions of bulk cancels (CancelJobs) between the domain and the protobuf messages."""

from __future__ import annotations

from collections.abc import Iterable

from appliance._proto.v1 import cluster_pb2
from appliance.domain.bulk_cancel import ACTIVE_NAMES, BulkCancelResult, CancelSelection
from appliance.domain.errors import InvalidSpec
from appliance.domain.phases import Phase
from appliance.domain.selectors import parse_selector
from appliance.protocol.convert import phase_from_pb, phase_to_pb


def selection_to_pb(selection: CancelSelection) -> cluster_pb2.CancelJobsRequest:
    s = selection
    return cluster_pb2.CancelJobsRequest(
        user=s.user, mine=s.mine, labels=dict(s.labels),
        phases=[phase_to_pb(p) for p in sorted(s.phases)], job_ids=list(s.job_ids), all=s.all,
        reason=s.reason, page_token=s.page_token, label_selector=str(s.selector),
    )  # fmt: skip


def selection_from_pb(msg: cluster_pb2.CancelJobsRequest) -> CancelSelection:
    """The request as a selection; a phase number that is no phase is refused here."""
    return CancelSelection(
        user=msg.user, mine=msg.mine, labels=dict(msg.labels), phases=_phases(msg.phases),
        job_ids=tuple(msg.job_ids), all=msg.all, reason=msg.reason, page_token=msg.page_token,
        selector=parse_selector(msg.label_selector),
    )  # fmt: skip


def _phases(values: Iterable[int]) -> frozenset[Phase]:
    found: set[Phase] = set()
    for value in values:
        phase = phase_from_pb(value)
        if phase is None:
            raise InvalidSpec(f"phase {value} is not a phase; phases are {ACTIVE_NAMES}",
                              field="phases")  # fmt: skip
        found.add(phase)
    return frozenset(found)


def result_to_pb(result: BulkCancelResult) -> cluster_pb2.CancelJobsResponse:
    r = result
    return cluster_pb2.CancelJobsResponse(
        cancelled=r.cancelled, finished=r.finished, refused=r.refused, not_found=r.not_found,
        cancelled_ids=r.cancelled_ids, refused_ids=r.refused_ids, not_found_ids=r.not_found_ids,
        message=r.message, next_page_token=r.next_page_token, refusal=r.refusal,
    )  # fmt: skip


def result_from_pb(msg: cluster_pb2.CancelJobsResponse) -> BulkCancelResult:
    return BulkCancelResult(
        cancelled=msg.cancelled, finished=msg.finished, refused=msg.refused,
        not_found=msg.not_found, cancelled_ids=tuple(msg.cancelled_ids),
        refused_ids=tuple(msg.refused_ids), not_found_ids=tuple(msg.not_found_ids),
        message=msg.message, next_page_token=msg.next_page_token, refusal=msg.refusal,
    )  # fmt: skip
