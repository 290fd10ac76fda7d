"""ListJobs/StreamJobs on the wire: cached summary bytes joined into responses, each queued
job's fresh position appended, responses split under the size limit."""

from __future__ import annotations

from appliance._proto.v1 import cluster_pb2
from appliance.domain.job import Job
from appliance.domain.phases import Phase
from appliance.domain.reasons import Reason, ReasonCode, said
from appliance.domain.spec import JobSpec
from appliance.protocol import convert
from appliance.server.grpc.summaries import responses, serialized

SPEC = JobSpec(params_yaml="", num_csx=1, num_steps=2)


def _job(job_id: str, phase: Phase = Phase.QUEUED) -> Job:
    reason = "needs 1 system, 0 free" if phase is Phase.QUEUED else ""
    return Job(
        id=job_id, user="u", spec=SPEC, phase=phase, created_at=1.0, updated_at=1.0,
        pending_reason=reason,
    )  # fmt: skip


def _jobs(out: list[cluster_pb2.ListJobsResponse]) -> list[cluster_pb2.Job]:
    return [job for response in out for job in response.jobs]


def test_a_position_reason_and_start_appended_to_cached_bytes_read_as_the_job_with_them() -> None:
    jobs = [_job("wsjob-a"), _job("wsjob-b"), _job("wsjob-c", Phase.RUNNING)]
    behind = said(
        ReasonCode.BEHIND_HIGHER_PRIORITY, shortfall="needs 4 systems, 0 free", head="wsjob-x",
        priority="P1", systems=4,
    )  # fmt: skip
    reasons: list[Reason | None] = [behind, None, None]
    positions, starts = [2, 300, 0], [1_800_000_123.25, 0.0, 0.0]
    listed = [
        (serialized(j), p, r, s)
        for j, p, r, s in zip(jobs, positions, reasons, starts, strict=True)
    ]
    [response] = responses(listed)
    for job, (_, position, reason, start), got in zip(jobs, listed, response.jobs, strict=True):
        expected = convert.job_to_pb(job)
        expected.queue_position = position
        expected.pending_reason = reason.message if reason else job.pending_reason
        expected.pending_reason_code = reason.code_text if reason else ""
        expected.estimated_start = start
        assert got == expected
    assert (
        response.jobs[0].pending_reason
        == "needs 4 systems, 0 free; behind wsjob-x (P1, 4 systems)"
    )
    assert response.jobs[0].pending_reason_code == "BehindHigherPriority"


def test_responses_are_split_under_the_size_limit_in_order() -> None:
    listed = [(serialized(_job(f"wsjob-{i:03}")), i, None, 0.0) for i in range(50)]
    one = len(listed[0][0])
    out = responses(listed, max_bytes=10 * one)
    assert len(out) > 1
    assert all(r.ByteSize() <= 10 * one + 10 * 16 for r in out)
    assert [j.id for j in _jobs(out)] == [f"wsjob-{i:03}" for i in range(50)]
    assert [j.queue_position for j in _jobs(out)] == list(range(50))
    big = [(serialized(_job("wsjob-big")), 0, None, 0.0)]
    assert len(responses(big, max_bytes=1)) == 1  # a single job larger than the limit
