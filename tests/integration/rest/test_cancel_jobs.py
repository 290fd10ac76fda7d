"""POST /api/v1/jobs:cancel against a live coordinator: a selection cancelled in one call, the
answer the gRPC door gives, and hostile bodies refused naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from appliance._proto.v1 import cluster_pb2 as pb
from appliance._proto.v1 import cluster_pb2_grpc
from tests.integration.coordinator.harness import RunningCoordinator, user_tokens
from tests.integration.rest.conftest import SMALL_PARAMS, Rest, park_systems
from tests.tls import secure_channel

ROUTE = "/api/v1/jobs:cancel"


def _phase(rest: Rest, job_id: str) -> str:
    return str(rest.job(job_id)["phase"])


def test_a_label_selection_is_cancelled_in_one_call_and_the_rest_left(parked: Rest) -> None:
    sweep = [parked.submit(labels={"sweep": "a"})["id"] for _ in range(3)]
    kept = [parked.submit(labels={"sweep": "b"})["id"] for _ in range(2)]

    response = parked.http.post(ROUTE, json={"labels": {"sweep": "a"}, "reason": "bad sweep"})

    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["cancelled"], body["finished"], body["refused"]) == (3, 0, 0)
    assert sorted(body["cancelled_ids"]) == sorted(sweep)
    assert body["message"] == "cancelled 3 jobs" and body["next_page_token"] == ""
    assert [_phase(parked, j) for j in sweep] == ["CANCELLED"] * 3
    assert parked.job(sweep[0])["reason"] == "bad sweep"
    assert [_phase(parked, j) for j in kept] == ["QUEUED"] * 2

    by_id = parked.http.post(ROUTE, json={"job_ids": [sweep[0], kept[0]]}).json()
    assert (by_id["cancelled"], by_id["finished"], by_id["cancelled_ids"]) == (1, 1, [kept[0]])


def test_both_doors_answer_a_bulk_cancel_alike(parked: Rest) -> None:
    rest_jobs = [parked.submit(labels={"door": "rest"})["id"] for _ in range(2)]
    grpc_jobs = [parked.submit(labels={"door": "grpc"})["id"] for _ in range(2)]

    via_rest = parked.http.post(ROUTE, json={"labels": {"door": "rest"}}).json()
    with secure_channel(parked.running.address) as channel:
        stub = cluster_pb2_grpc.ClusterServiceStub(channel)
        via_grpc = stub.CancelJobs(pb.CancelJobsRequest(labels={"door": "grpc"}))

    assert sorted(via_rest.pop("cancelled_ids")) == sorted(rest_jobs)
    assert sorted(via_grpc.cancelled_ids) == sorted(grpc_jobs)
    assert via_rest == {
        "cancelled": via_grpc.cancelled, "finished": via_grpc.finished,
        "refused": via_grpc.refused, "not_found": via_grpc.not_found, "refused_ids": [],
        "not_found_ids": [], "message": via_grpc.message, "next_page_token": "", "refusal": "",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        ({}, "all", "say whose jobs to cancel"),
        ({"phases": ["QUEUED"]}, "all", "phases only narrow"),
        ({"user": "anonymous", "phases": ["DONE"]}, "phases.0", "Input should be"),
        ({"user": "anonymous", "phases": ["SUCCEEDED"]}, "phases", "finished phase"),
        ({"labels": {f"k{i}": "v" for i in range(5_000)}}, "labels", "at most 64 labels"),
        ({"labels": {"k": "v" * 100_000}}, "labels", "a value at most 63"),
        ({"user": "no such/user"}, "user", "user must be"),
        ({"user": "u" * 300}, "user", "at most 253"),
        ({"mine": True}, "user", "mine needs the caller's user name"),
        ({"user": "x", "job_ids": ["wsjob-000000000000"]}, "job_ids", "not both"),
        ({"job_ids": ["../etc/passwd"]}, "job_ids", "is not a job id"),
        ({"user": "x", "everything": True}, "everything", "Extra inputs"),
        ({"user": "x", "all": "yes"}, "all", "valid boolean"),
    ],
)
def test_a_hostile_body_is_refused_naming_the_field(
    parked: Rest, body: dict[str, Any], field: str, says: str
) -> None:
    job_id = parked.submit()["id"]
    response = parked.http.post(ROUTE, json=body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field and says in error["message"]
    assert "\n" not in error["message"] and len(error["message"]) < 300
    assert _phase(parked, job_id) == "QUEUED"
    parked.http.post(f"/api/v1/jobs/{job_id}/cancel")


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    tokens_file = tmp_path / "tokens.yaml"
    tokens = user_tokens(tokens_file, ["alice", "bob", "root"])
    park_systems(tmp_path / "data")
    running = RunningCoordinator(tmp_path / "data", auth_tokens_file=tokens_file).start()
    try:
        yield f"https://127.0.0.1:{running.coordinator.http_port}", tokens
    finally:
        running.stop()


def test_with_tokens_mine_is_the_callers_and_all_is_for_admins(
    secured: tuple[str, dict[str, str]],
) -> None:
    base, tokens = secured

    def as_(user: str) -> httpx.Client:
        headers = {"Authorization": f"Bearer {tokens[user]}"}
        return httpx.Client(base_url=base, headers=headers, timeout=30)

    body = {"params": SMALL_PARAMS, "num_csx": 1, "num_steps": 2}
    with as_("alice") as alice, as_("bob") as bob, as_("root") as root:
        alices = {alice.post("/api/v1/jobs", json=body).json()["id"] for _ in range(2)}
        bobs = {bob.post("/api/v1/jobs", json=body).json()["id"]}

        refused = bob.post(ROUTE, json={"user": "alice"}).json()
        assert (refused["cancelled"], set(refused["refused_ids"])) == (0, alices)
        denied = bob.post(ROUTE, json={"all": True})
        assert denied.status_code == 403 and denied.json()["error"]["field"] == "all"
        mine = bob.post(ROUTE, json={"mine": True}).json()
        assert set(mine["cancelled_ids"]) == bobs
        every = root.post(ROUTE, json={"all": True, "phases": ["QUEUED"]}).json()
        assert set(every["cancelled_ids"]) == alices
