"""Hypothesis-generated gRPC messages: no input gets INTERNAL/UNKNOWN, every rejection names
its field, and nothing half-valid is stored."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance._proto.v1 import cluster_pb2 as pb
from appliance._proto.v1 import cluster_pb2_grpc
from appliance.domain.inventory import NodeState
from appliance.protocol.errors import FIELD_KEY
from tests.fuzz_report import report
from tests.hostile_params import HOSTILE_PARAMS
from tests.integration.coordinator.harness import RunningCoordinator
from tests.tls import secure_channel

SYSTEMS = ["cs2-01", "cs2-02", "cs2-03", "cs2-04"]
EXAMPLES = 150
ACCEPTABLE = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
}
INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
TEXT = st.text(max_size=80)
PARAMS = st.one_of(
    TEXT,
    st.just("model:\n  name: fc_mnist\n  hidden_sizes: [4]\n"),
    st.builds(lambda n, h: f"model:\n  name: {n}\n  hidden_sizes: [{h}]\n", TEXT, INT64),
    st.builds(lambda k, v: f"model: {{name: fc_mnist}}\n{k}: {v}\n", TEXT, TEXT),
    HOSTILE_PARAMS,
)
cases = {"count": 0}


@pytest.fixture(scope="module")
def stub(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[cluster_pb2_grpc.ClusterServiceStub]:
    running = RunningCoordinator(tmp_path_factory.mktemp("fuzz") / "data").start()
    running.coordinator.ctx.store.set_node_state(SYSTEMS, NodeState.MAINTENANCE)
    try:
        with secure_channel(running.address) as channel:
            yield cluster_pb2_grpc.ClusterServiceStub(channel)
    finally:
        running.stop()
        report(f"gRPC fuzz (hypothesis): {cases['count']} generated requests")


def _check(call: object) -> object | None:
    """Run one call; a rejection must be an expected code with a message (and a field when the
    argument is invalid)."""
    cases["count"] += 1
    try:
        return call()  # type: ignore[operator]
    except grpc.RpcError as exc:
        assert exc.code() in ACCEPTABLE, (exc.code(), exc.details())
        assert exc.details()
        if exc.code() is grpc.StatusCode.INVALID_ARGUMENT:
            assert any(k == FIELD_KEY for k, _ in exc.trailing_metadata() or ()), exc.details()
        return None


settings_ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@settings_
@given(
    params=PARAMS, num_csx=INT32, num_steps=INT64, mode=INT32, priority=INT32,
    labels=st.dictionaries(TEXT, TEXT, max_size=3), model_dir=TEXT, user=TEXT,
    lease=st.floats(allow_nan=True, allow_infinity=True),
)  # fmt: skip
def test_submit_job(
    stub: cluster_pb2_grpc.ClusterServiceStub, params: str, num_csx: int, num_steps: int,
    mode: int, priority: int, labels: dict[str, str], model_dir: str, user: str, lease: float,
) -> None:  # fmt: skip
    spec = pb.JobSpec(
        params_yaml=params, num_csx=num_csx, num_steps=num_steps, mode=mode, priority=priority,
        labels=labels, model_dir=model_dir,
    )  # fmt: skip
    request = pb.SubmitJobRequest(spec=spec, user=user, lease_seconds=lease)
    job = _check(lambda: stub.SubmitJob(request, timeout=30))
    if job is not None:  # accepted: it is stored whole and readable
        assert isinstance(job, pb.Job)
        assert stub.GetJob(pb.GetJobRequest(job_id=job.id)).spec.params_yaml == params
        stub.CancelJob(pb.CancelJobRequest(job_id=job.id))


@settings_
@given(params=PARAMS, num_csx=INT32, mode=INT32)
def test_compile_job(
    stub: cluster_pb2_grpc.ClusterServiceStub, params: str, num_csx: int, mode: int
) -> None:
    spec = pb.JobSpec(params_yaml=params, num_csx=num_csx, num_steps=1, mode=mode)
    _check(lambda: stub.CompileJob(pb.CompileJobRequest(spec=spec), timeout=30))


@settings_
@given(
    job_id=st.one_of(TEXT, st.from_regex(r"wsjob-[0-9a-z]{12,40}", fullmatch=True)),
    reason=TEXT, token=TEXT, limit=INT32, labels=st.dictionaries(TEXT, TEXT, max_size=2),
    priority=INT32, after=INT64, replica=TEXT,
)  # fmt: skip
def test_job_calls(
    stub: cluster_pb2_grpc.ClusterServiceStub, job_id: str, reason: str, token: str, limit: int,
    labels: dict[str, str], priority: int, after: int, replica: str,
) -> None:  # fmt: skip
    _check(lambda: stub.GetJob(pb.GetJobRequest(job_id=job_id)))
    _check(lambda: stub.CancelJob(pb.CancelJobRequest(job_id=job_id, reason=reason)))
    _check(lambda: stub.GetJobEvents(pb.GetJobEventsRequest(job_id=job_id)))
    _check(lambda: stub.SetJobPriority(pb.SetJobPriorityRequest(job_id=job_id, priority=priority)))
    _check(lambda: stub.UpdateJobLabels(pb.UpdateJobLabelsRequest(job_id=job_id, set=labels)))
    _check(lambda: stub.HeartbeatLease(pb.HeartbeatLeaseRequest(job_id=job_id, holder=reason)))
    _check(lambda: stub.ListJobs(pb.ListJobsRequest(limit=limit, page_token=token, labels=labels)))
    _check(lambda: list(stub.WatchJob(pb.WatchJobRequest(job_id=job_id, after_seq=after))))
    _check(lambda: list(stub.GetJobLogs(pb.GetJobLogsRequest(job_id=job_id, replica=replica))))


@settings_
@given(
    user=TEXT, mine=st.booleans(), labels=st.dictionaries(TEXT, TEXT, max_size=2),
    phases=st.lists(INT32, max_size=3),
    job_ids=st.lists(st.one_of(TEXT, st.from_regex(r"wsjob-[0-9a-z]{12,40}", fullmatch=True)),
                     max_size=3),
    every=st.booleans(), reason=TEXT, token=TEXT,
)  # fmt: skip
def test_cancel_jobs(
    stub: cluster_pb2_grpc.ClusterServiceStub, user: str, mine: bool, labels: dict[str, str],
    phases: list[int], job_ids: list[str], every: bool, reason: str, token: str,
) -> None:  # fmt: skip
    request = pb.CancelJobsRequest(
        user=user, mine=mine, labels=labels, job_ids=job_ids, all=every, reason=reason,
        page_token=token,
    )  # fmt: skip
    request.phases.extend(phases)  # type: ignore[arg-type]  # numbers that are no phase too
    _check(lambda: stub.CancelJobs(request, timeout=30))
