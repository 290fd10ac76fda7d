"""Cancels are group-committed (services/cancels.py): many at once, each answered on its own."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from appliance._proto.v1 import cluster_pb2 as pb
from appliance._proto.v1 import cluster_pb2_grpc, common_pb2
from appliance.client import ApplianceClient
from appliance.domain.auth import Principal
from appliance.domain.errors import NotFound, PermissionDenied
from appliance.domain.inventory import NodeState
from appliance.domain.phase_moves import PhaseMove
from appliance.domain.phases import Phase
from appliance.services.jobs import JobService
from appliance.store.jobs import JobStore
from tests.integration.coordinator.harness import RunningCoordinator, wait_until, worker_processes
from tests.tls import secure_aio_channel, secure_channel

PARAMS = "model:\n  name: fc_mnist\n  hidden_sizes: [8]\n"
SYSTEMS = ["cs2-01", "cs2-02", "cs2-03", "cs2-04"]


@pytest.fixture
def coordinator_database(store_url: str) -> str:
    """Run every test here against SQLite and PostgreSQL."""
    return store_url


@pytest.fixture
def stub(coordinator: RunningCoordinator) -> Iterator[cluster_pb2_grpc.ClusterServiceStub]:
    with secure_channel(coordinator.address) as channel:
        yield cluster_pb2_grpc.ClusterServiceStub(channel)


@pytest.fixture
def batches(coordinator: RunningCoordinator, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The jobs of every JobStore.set_phases call (one per group-committed batch)."""
    store: JobStore = coordinator.coordinator.ctx.store
    calls: list[list[str]] = []
    set_phases = store.set_phases

    def spy(moves: Sequence[PhaseMove], now: float) -> Any:
        calls.append([m.job_id for m in moves])
        return set_phases(moves, now)

    monkeypatch.setattr(store, "set_phases", spy)
    return calls


def _submit(stub: cluster_pb2_grpc.ClusterServiceStub, user: str = "u") -> str:
    spec = pb.JobSpec(params_yaml=PARAMS, num_csx=1, num_steps=2)
    return stub.SubmitJob(pb.SubmitJobRequest(spec=spec, user=user)).id


async def _cancel_concurrently(address: str, job_ids: list[str]) -> list[pb.CancelJobResponse]:
    async with secure_aio_channel(address) as channel:
        stub = cluster_pb2_grpc.ClusterServiceStub(channel)
        calls = [stub.CancelJob(pb.CancelJobRequest(job_id=j, reason="bulk")) for j in job_ids]
        return list(await asyncio.gather(*calls))


def test_concurrent_cancels_each_get_their_own_answer(
    coordinator: RunningCoordinator,
    stub: cluster_pb2_grpc.ClusterServiceStub,
    batches: list[list[str]],
) -> None:
    coordinator.coordinator.ctx.store.set_node_state(SYSTEMS, NodeState.MAINTENANCE)
    job_ids = [_submit(stub) for _ in range(60)]
    requests = job_ids + job_ids[:10]  # ten jobs cancelled twice

    answers = asyncio.run(_cancel_concurrently(coordinator.address, requests))

    assert len(batches) < len(requests)  # group-committed
    assert sum(len(b) for b in batches) >= len(job_ids)
    by_job: dict[str, list[pb.CancelJobResponse]] = {}
    for job_id, answer in zip(requests, answers, strict=True):
        assert answer.job.id == job_id
        assert answer.job.phase == common_pb2.PHASE_CANCELLED and answer.job.reason == "bulk"
        if answer.changed:  # the full view, as GetJob gives it
            assert answer.job.spec.params_yaml == PARAMS
        by_job.setdefault(job_id, []).append(answer)
    for job_id, mine in by_job.items():
        assert [a.changed for a in mine].count(True) == 1, job_id
        assert f"job {job_id} cancelled" in [a.message for a in mine]
        already = f"job {job_id} was already cancelled"
        assert all(a.message == already for a in mine if not a.changed)
        events = stub.GetJobEvents(pb.GetJobEventsRequest(job_id=job_id)).events
        assert [e.to_phase for e in events] == [
            common_pb2.PHASE_QUEUED,
            common_pb2.PHASE_CANCELLED,
        ]


def test_one_batch_answers_each_cancel_on_its_own(
    coordinator: RunningCoordinator,
    stub: cluster_pb2_grpc.ClusterServiceStub,
    batches: list[list[str]],
) -> None:
    """Cancels of another group's job, an unknown job, ended jobs and the caller's own jobs
    land in one batch; each gets the answer it would get alone."""
    store: JobStore = coordinator.coordinator.ctx.store
    store.set_node_state(SYSTEMS, NodeState.MAINTENANCE)
    jobs: JobService = coordinator.coordinator.jobs
    bob = Principal("bob", ("cv",))
    alices, bobs, bobs_other = _submit(stub, "alice"), _submit(stub, "bob"), _submit(stub, "bob")
    failed, cancelled = _submit(stub, "bob"), _submit(stub, "bob")
    assert store.set_phase(failed, Phase.FAILED, "broke", 1.0).applied
    assert store.set_phase(cancelled, Phase.CANCELLED, "earlier", 1.0).applied
    unknown = "wsjob-000000000000"

    async def cancel_together() -> list[Any]:
        calls = [
            jobs.cancel(job_id, by=bob)
            for job_id in (alices, unknown, bobs, failed, cancelled, bobs_other)
        ]
        return list(await asyncio.gather(*calls, return_exceptions=True))

    answers = coordinator.call(cancel_together())

    assert batches == [[bobs, bobs_other]]  # one transaction, the two that go ahead
    assert isinstance(answers, list)
    denied, missing, mine, ended, again, other = answers
    assert isinstance(denied, PermissionDenied) and "bob may not cancel" in denied.message
    assert isinstance(missing, NotFound) and unknown in missing.message
    assert mine[0].id == bobs and mine[0].phase is Phase.CANCELLED
    assert mine[1:] == (True, f"job {bobs} cancelled")
    assert mine[0].reason == "cancelled by bob"
    assert ended[0].id == failed and ended[0].phase is Phase.FAILED
    assert ended[1:] == (False, f"job {failed} already FAILED; nothing to cancel")
    assert again[0].reason == "earlier"
    assert again[1:] == (False, f"job {cancelled} was already cancelled")
    assert other[0].id == bobs_other and other[1] is True
    assert store.phase_of(alices) is Phase.QUEUED


def test_a_batch_with_a_running_job_tears_it_down_and_frees_its_systems(
    coordinator: RunningCoordinator, client: ApplianceClient, params_file: Path
) -> None:
    big = client.submit(params=params_file, num_csx=4, num_steps=100_000)
    wait_until(lambda: big.status.phase is Phase.RUNNING, 60, "the 4-system job to run")
    waiting = client.submit(params=params_file, num_csx=2, num_steps=5)
    dropped = client.submit(params=params_file, num_csx=1, num_steps=5)
    wait_until(lambda: waiting.status.pending_reason.startswith("needs 2 systems"), 10)
    jobs: JobService = coordinator.coordinator.jobs

    async def cancel_together() -> list[Any]:
        return list(await asyncio.gather(jobs.cancel(big.id), jobs.cancel(dropped.id)))

    answers = coordinator.call(cancel_together())

    assert isinstance(answers, list) and [a[1] for a in answers] == [True, True]
    wait_until(lambda: not worker_processes(big.id), 10, "the running job's replicas to go")
    assert waiting.wait(timeout=60).phase is Phase.SUCCEEDED  # its systems came back
    assert big.status.phase is Phase.CANCELLED and dropped.status.phase is Phase.CANCELLED
