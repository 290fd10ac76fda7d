"""ListJobs and StreamJobs serve cached summaries: they must always match GetJob."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from sqlalchemy import func, select

from appliance._proto.v1 import cluster_pb2 as pb
from appliance._proto.v1 import cluster_pb2_grpc, common_pb2
from appliance.client import ApplianceClient
from appliance.domain.inventory import NodeState
from appliance.domain.phases import Phase
from appliance.store.tables import JobRenderingRow
from tests.integration.coordinator.harness import RunningCoordinator, wait_until
from tests.tls import secure_channel

SYSTEMS = ["cs2-01", "cs2-02", "cs2-03", "cs2-04"]


@pytest.fixture
def stub(coordinator: RunningCoordinator) -> Iterator[cluster_pb2_grpc.ClusterServiceStub]:
    with secure_channel(coordinator.address) as channel:
        yield cluster_pb2_grpc.ClusterServiceStub(channel)


def _listed(stub: cluster_pb2_grpc.ClusterServiceStub, **request: object) -> dict[str, pb.Job]:
    jobs = stub.ListJobs(pb.ListJobsRequest(**request)).jobs  # type: ignore[arg-type]
    return {j.id: j for j in jobs}


def _streamed(stub: cluster_pb2_grpc.ClusterServiceStub, **request: object) -> dict[str, pb.Job]:
    pages = stub.StreamJobs(pb.ListJobsRequest(**request), timeout=30)  # type: ignore[arg-type]
    return {j.id: j for page in pages for j in page.jobs}


@pytest.fixture
def coordinator_database(store_url: str) -> str:
    """Run every test here against SQLite and PostgreSQL."""
    return store_url


def test_listings_follow_every_change_of_a_job(
    client: ApplianceClient, stub: cluster_pb2_grpc.ClusterServiceStub, params_file: Path
) -> None:
    running = client.submit(params=params_file, num_csx=4, num_steps=1_000_000)
    wait_until(lambda: running.status.phase is Phase.RUNNING, 60, "the job to run")
    queued = client.submit(params=params_file, num_csx=1, num_steps=2, labels={"k": "v"})
    wait_until(lambda: queued.status.pending_reason.startswith("needs 1 system"), 10)

    for listing in (_listed(stub, all=True), _streamed(stub, all=True)):
        assert listing[queued.id].pending_reason == "needs 1 system, 0 free"
        assert listing[queued.id].spec.labels == {"k": "v"}
        assert listing[queued.id].spec.params_yaml == ""  # summaries leave the params out
    step = _streamed(stub)[running.id].progress.step
    wait_until(lambda: _streamed(stub)[running.id].progress.step > step, 30, "progress")

    running.cancel()
    assert queued.wait(timeout=60).phase is Phase.SUCCEEDED
    for listing in (_listed(stub, all=True), _streamed(stub, all=True)):
        assert listing[running.id].phase == common_pb2.PHASE_CANCELLED
        assert listing[queued.id].phase == common_pb2.PHASE_SUCCEEDED
        assert listing[queued.id].progress.step == 2
    assert _listed(stub) == {} and _streamed(stub) == {}  # nothing active is left
    for job_id in (running.id, queued.id):
        full = stub.GetJob(pb.GetJobRequest(job_id=job_id))
        summary = _streamed(stub, all=True)[job_id]
        full.ClearField("replicas")
        full.spec.params_yaml = ""
        assert summary == full


def test_list_pages_and_limits(
    client: ApplianceClient, stub: cluster_pb2_grpc.ClusterServiceStub, tmp_path: Path
) -> None:
    params = tmp_path / "p.yaml"
    params.write_text("model: {name: fc_mnist, hidden_sizes: [4]}\n")
    submitted = [client.submit(params=params, num_csx=1, num_steps=1).id for _ in range(5)]
    for job_id in submitted:
        client.job(job_id).wait(timeout=60)
    first = stub.ListJobs(pb.ListJobsRequest(all=True, limit=3))
    second = stub.ListJobs(pb.ListJobsRequest(all=True, limit=3, page_token=first.next_page_token))
    assert [j.id for j in first.jobs] + [j.id for j in second.jobs] == submitted[::-1]
    assert second.next_page_token == ""
    pages = list(stub.StreamJobs(pb.ListJobsRequest(all=True, limit=2)))
    assert [len(p.jobs) for p in pages] == [2, 2, 1]
    with pytest.raises(grpc.RpcError) as info:
        stub.ListJobs(pb.ListJobsRequest(limit=10_001))
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_listed_queue_positions_and_reasons_match_get_job_and_follow_the_queue(
    coordinator: RunningCoordinator, stub: cluster_pb2_grpc.ClusterServiceStub
) -> None:
    coordinator.coordinator.ctx.store.set_node_state(SYSTEMS, NodeState.MAINTENANCE)
    params = "model: {name: fc_mnist, hidden_sizes: [4]}\n"
    spec = pb.JobSpec(params_yaml=params, num_csx=1, num_steps=2)
    job_ids = [stub.SubmitJob(pb.SubmitJobRequest(spec=spec)).id for _ in range(4)]

    def seen() -> list[dict[str, tuple[int, str]]]:
        """job -> (queue position, pending reason) as GetJob, ListJobs, StreamJobs and
        StreamJobs in small pages give them."""
        got = {j: stub.GetJob(pb.GetJobRequest(job_id=j)) for j in job_ids}
        views = [{j: (job.queue_position, job.pending_reason) for j, job in got.items()}]
        for listing in (_listed(stub), _streamed(stub), _streamed(stub, limit=3)):
            views.append({j: (listing[j].queue_position, listing[j].pending_reason) for j in got})
        return views

    def agreed(reason_of_last: str) -> dict[str, tuple[int, str]]:
        """The views once they agree (the scheduler rewrites reasons after each change)."""
        wait_until(
            lambda: (
                all(v == seen()[0] for v in seen()) and reason_of_last in seen()[0][job_ids[-1]][1]
            ),
            10,
            "listed and full views to agree",
        )
        return seen()[0]

    def listed_positions() -> list[list[int]]:
        return [[view[j][0] for j in job_ids] for view in seen()]

    assert [agreed("needs 1 system, 0 free")[j][0] for j in job_ids] == [1, 2, 3, 4]

    # The other jobs' summaries are cached and unchanged, yet their positions move at once.
    stub.SetJobPriority(pb.SetJobPriorityRequest(job_id=job_ids[3], priority=2))
    assert listed_positions() == [[2, 3, 4, 1]] * 4
    first = agreed("needs 1 system")
    assert "behind " + job_ids[3] in first[job_ids[0]][1]
    stub.CancelJob(pb.CancelJobRequest(job_id=job_ids[1]))
    job_ids.remove(job_ids[1])
    assert listed_positions() == [[2, 3, 1]] * 4
    agreed("needs 1 system")

    for job_id in job_ids:
        stub.CancelJob(pb.CancelJobRequest(job_id=job_id))
    assert all(job.queue_position == 0 for job in _listed(stub, all=True).values())


def test_listings_after_restarts_match_get_job_though_jobs_changed_after_being_kept(
    tmp_path: Path, coordinator_database: str
) -> None:
    """Renderings kept in the store by one coordinator are served by the next only for jobs
    that did not change since: every listing matches GetJob."""
    data_dir = tmp_path / "data"
    running = RunningCoordinator(data_dir, database_url=coordinator_database).start()
    try:
        running.coordinator.ctx.store.set_node_state(SYSTEMS, NodeState.MAINTENANCE)
        spec = pb.JobSpec(params_yaml="model: {name: fc_mnist}\n", num_csx=1, num_steps=2)
        with secure_channel(running.address) as channel:
            stub = cluster_pb2_grpc.ClusterServiceStub(channel)
            ids = [stub.SubmitJob(pb.SubmitJobRequest(spec=spec)).id for _ in range(5)]
            stub.CancelJob(pb.CancelJobRequest(job_id=ids[4]))

        running = _restarted(running, data_dir, coordinator_database)  # renders and keeps all
        wait_until(lambda: _kept(running) == 5, 15, "the renderings to be kept")
        with secure_channel(running.address) as channel:
            stub = cluster_pb2_grpc.ClusterServiceStub(channel)
            stub.UpdateJobLabels(pb.UpdateJobLabelsRequest(job_id=ids[1], set={"team": "nlp"}))
            stub.SetJobPriority(
                pb.SetJobPriorityRequest(job_id=ids[2], priority=common_pb2.PRIORITY_P1)
            )
            stub.CancelJob(pb.CancelJobRequest(job_id=ids[3]))

        running = _restarted(running, data_dir, coordinator_database)
        with secure_channel(running.address) as channel:
            stub = cluster_pb2_grpc.ClusterServiceStub(channel)
            wait_until(lambda: _match_get_job(stub, ids), 15, "listings to match GetJob")
            listed = _streamed(stub, all=True)
        assert listed[ids[1]].spec.labels == {"team": "nlp"}
        assert listed[ids[2]].spec.priority == common_pb2.PRIORITY_P1
        assert listed[ids[3]].phase == common_pb2.PHASE_CANCELLED
        assert [listed[i].queue_position for i in ids] == [2, 3, 1, 0, 0]
    finally:
        running.stop()


def _restarted(old: RunningCoordinator, data_dir: Path, database: str) -> RunningCoordinator:
    old.stop()
    return RunningCoordinator(data_dir, database_url=database).start()


def _kept(running: RunningCoordinator) -> int:
    with running.coordinator.ctx.store.engine.connect() as conn:
        return int(conn.scalar(select(func.count()).select_from(JobRenderingRow)) or 0)


def _match_get_job(stub: cluster_pb2_grpc.ClusterServiceStub, ids: list[str]) -> bool:
    """Whether ListJobs, StreamJobs and StreamJobs in small pages each show every job as
    GetJob does (without its replicas and params, as a summary)."""
    full = {}
    for job_id in ids:
        job = stub.GetJob(pb.GetJobRequest(job_id=job_id))
        job.ClearField("replicas")
        job.spec.params_yaml = ""
        full[job_id] = job
    listings = (_listed(stub, all=True), _streamed(stub, all=True), _streamed(stub, limit=2))
    return all(listing[j] == full[j] for listing in listings for j in listing)
