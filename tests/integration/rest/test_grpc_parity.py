"""REST and gRPC are two doors onto the same use cases: they must return the same data."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from appliance._proto.v1 import cluster_pb2 as pb
from appliance._proto.v1 import cluster_pb2_grpc
from appliance.protocol import convert
from appliance.server.rest.models import event_out, job_out
from csctl.render import job_document
from tests.integration.coordinator.harness import wait_until
from tests.integration.rest.conftest import Rest
from tests.tls import secure_channel

DONE = {"SUCCEEDED", "FAILED", "STOPPED"}


@pytest.fixture(scope="module")
def stub(rest: Rest) -> Iterator[cluster_pb2_grpc.ClusterServiceStub]:
    with secure_channel(rest.running.address) as channel:
        yield cluster_pb2_grpc.ClusterServiceStub(channel)


def _via_grpc(stub: cluster_pb2_grpc.ClusterServiceStub, job_id: str) -> dict[str, Any]:
    job = convert.job_from_pb(stub.GetJob(pb.GetJobRequest(job_id=job_id)))
    return job_out(job).model_dump(mode="json")


def test_a_finished_job_reads_the_same_through_both_doors(
    rest: Rest, stub: cluster_pb2_grpc.ClusterServiceStub
) -> None:
    job = rest.submit(num_steps=2, labels={"door": "both"})
    rest.wait_phase(job["id"], {"SUCCEEDED", "FAILED", "CANCELLED"})
    wait_until(
        lambda: all(r["phase"] in DONE for r in rest.job(job["id"])["replicas"]),
        30,
        "every replica to be torn down",
    )
    final = rest.job(job["id"])
    assert final["replicas"] and final["systems"]  # a job with every field filled in
    assert final == _via_grpc(stub, job["id"])

    grpc_events = stub.GetJobEvents(pb.GetJobEventsRequest(job_id=job["id"])).events
    rest_events = rest.http.get(f"/api/v1/jobs/{job['id']}/events").json()["events"]
    assert rest_events == [
        event_out(convert.event_from_pb(e)).model_dump(mode="json") for e in grpc_events
    ]


def test_rest_and_csctl_write_moments_and_priorities_alike(
    rest: Rest, stub: cluster_pb2_grpc.ClusterServiceStub
) -> None:
    """One representation everywhere: RFC 3339 times (null when not happened) and P0..P3."""
    job = rest.submit(num_steps=2, priority="p3")
    rest.wait_phase(job["id"], {"SUCCEEDED", "FAILED", "CANCELLED"})
    through_rest = rest.job(job["id"])
    by_csctl = job_document(
        convert.job_from_pb(stub.GetJob(pb.GetJobRequest(job_id=job["id"]))), with_params=False
    )
    moments = ("created_at", "updated_at", "started_at", "finished_at")
    for key in moments:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", through_rest[key]), key
        assert through_rest[key] == by_csctl[key], key
    assert through_rest["progress"]["reported_at"] == by_csctl["progress"]["reported_at"]
    assert through_rest["spec"]["priority"] == by_csctl["spec"]["priority"] == "P3"
    assert through_rest["lease"] is None  # ended: no lease held


def test_a_moment_not_happened_is_null(parked: Rest) -> None:
    queued = parked.job(parked.submit()["id"])  # parked: it stays QUEUED
    assert queued["phase"] == "QUEUED"
    assert queued["started_at"] is None and queued["finished_at"] is None
    assert queued["progress"]["reported_at"] is None
    assert queued["created_at"].endswith("Z")


def test_queued_and_cancelled_jobs_and_lists_match(
    parked: Rest, rest: Rest, stub: cluster_pb2_grpc.ClusterServiceStub
) -> None:
    with secure_channel(parked.running.address) as channel:
        parked_stub = cluster_pb2_grpc.ClusterServiceStub(channel)

        # Every priority: P0 is 0 on the wire, and a reader that took 0 for "unset" showed it P2.
        # The scheduler may rewrite a queued job's pending reason between the two reads:
        # parity is that both doors show the same job once it stands still.
        def same(job_id: str) -> bool:
            return parked.job(job_id) == _via_grpc(parked_stub, job_id)

        for priority in ("p0", "p1", "p2", "p3"):
            job = parked.submit(labels={"door": "both"}, priority=priority)
            job_id = job["id"]
            wait_until(lambda: same(job_id), 10, f"REST and gRPC to agree on a {priority} job")  # noqa: B023
            assert _via_grpc(parked_stub, job["id"])["spec"]["priority"] == priority.upper()
            parked.http.post(f"/api/v1/jobs/{job['id']}/cancel", json={"reason": "parity"})
            assert same(job["id"])  # a cancelled job no longer changes

        listed = parked_stub.ListJobs(pb.ListJobsRequest(all=True, labels={"door": "both"}))
        rest_list = parked.http.get("/api/v1/jobs", params={"all": True, "label": "door=both"})
        assert rest_list.json()["jobs"] == [
            job_out(convert.job_from_pb(j)).model_dump(mode="json") for j in listed.jobs
        ]
