"""Queues, dependencies and usage through REST and gRPC with authentication on: who may
submit where and define queues, and every bad input refused naming its field with nothing
stored."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
import yaml
from click.testing import CliRunner

from appliance._proto.v1 import cluster_pb2, cluster_pb2_grpc
from appliance.domain.auth import bearer_metadata
from appliance.domain.inventory import NodeState
from appliance.server.auth import create_token
from csctl.cli import cli
from tests.integration.coordinator.harness import RunningCoordinator
from tests.integration.rest.conftest import SMALL_PARAMS
from tests.tls import secure_channel

SYSTEMS = ["cs2-01", "cs2-02", "cs2-03", "cs2-04"]
QUEUES = "queues:\n  - {name: nlp, systems: 2, groups: [nlp]}\n  - {name: vision, systems: 1}\n"
BODY = {"params": SMALL_PARAMS, "num_csx": 1, "num_steps": 2}


@pytest.fixture(scope="module")
def secured(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RunningCoordinator, dict[str, str]]]:
    tmp_path = tmp_path_factory.mktemp("queues")
    tokens_file, queues = tmp_path / "tokens.yaml", tmp_path / "queues.yaml"
    queues.write_text(QUEUES)
    tokens = {
        "alice": create_token(tokens_file, "alice", ["nlp"], admin=False),
        "bob": create_token(tokens_file, "bob", ["cv"], admin=False),
        "root": create_token(tokens_file, "root", [], admin=True),
    }
    running = RunningCoordinator(
        tmp_path / "data", auth_tokens_file=tokens_file, queues_file=queues
    ).start()
    running.coordinator.ctx.store.set_node_state(SYSTEMS, NodeState.MAINTENANCE)  # jobs wait
    try:
        yield running, tokens
    finally:
        running.stop()


def _client(running: RunningCoordinator, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=f"https://127.0.0.1:{running.coordinator.http_port}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def _error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


def _job_count(client: httpx.Client) -> int:
    return len(client.get("/api/v1/jobs", params={"limit": 1000}).json()["jobs"])


def test_who_may_submit_where(secured: tuple[RunningCoordinator, dict[str, str]]) -> None:
    running, tokens = secured
    with _client(running, tokens["alice"]) as alice, _client(running, tokens["bob"]) as bob:
        before = _job_count(alice)
        job = alice.post("/api/v1/jobs", json=BODY | {"queue": "nlp"}).json()
        assert job["spec"]["queue"] == "nlp" and job["queue_position"] in (0, 1)
        denied = _error(bob.post("/api/v1/jobs", json=BODY | {"queue": "nlp"}), 403)
        assert denied["field"] == "queue" and "queue nlp" in denied["message"]
        unknown = _error(alice.post("/api/v1/jobs", json=BODY | {"queue": "robotics"}), 422)
        assert unknown["field"] == "queue" and "robotics does not exist" in unknown["message"]
        bad_name = _error(alice.post("/api/v1/jobs", json=BODY | {"queue": "NLP!"}), 422)
        assert bad_name["field"] == "queue"
        missing = "wsjob-00000000000000"
        no_dep = _error(alice.post("/api/v1/jobs", json=BODY | {"depends_on": [missing]}), 422)
        assert no_dep["field"] == "depends_on" and missing in no_dep["message"]
        bad_dep = _error(alice.post("/api/v1/jobs", json=BODY | {"depends_on": ["later:x"]}), 422)
        assert bad_dep["field"] == "depends_on"
        assert _job_count(alice) == before + 1  # only the good one was stored
        # A dependency on a job that exists (anyone's) is taken, and shown both ways.
        after = bob.post("/api/v1/jobs", json=BODY | {"depends_on": [f"afterany:{job['id']}"]})
        assert after.status_code == 201, after.text
        shown = bob.get(f"/api/v1/jobs/{after.json()['id']}").json()
        assert shown["spec"]["depends_on"] == [f"afterany:{job['id']}"]
        assert alice.get(f"/api/v1/jobs/{job['id']}").json()["dependents"] == [shown["id"]]


def test_only_admins_define_queues_and_bad_fields_are_named(
    secured: tuple[RunningCoordinator, dict[str, str]],
) -> None:
    running, tokens = secured
    with _client(running, tokens["alice"]) as alice, _client(running, tokens["root"]) as root:
        listed = {q["name"]: q for q in alice.get("/api/v1/queues").json()["queues"]}
        assert sorted(listed) == ["default", "nlp", "vision"]
        assert (listed["nlp"]["quota_systems"], listed["default"]["quota_systems"]) == (2, 1)
        assert listed["nlp"]["source"] == "file" and listed["nlp"]["groups"] == ["nlp"]

        assert _error(alice.put("/api/v1/queues/cv", json={"systems": 1}), 403)["field"]
        for body, field in (
            ({"systems": -1}, "systems"),
            ({"weight": 0}, "weight"),
            ({"memoryx": "lots"}, "memoryx"),
            ({"borrow_systems": "some"}, "borrow_systems"),
            ({"borrow_systems": "²"}, "borrow_systems"),
            ({"memoryx": "9" * 30 + "GiB"}, "memoryx"),
            ({"colour": "red"}, "colour"),
        ):
            error = _error(root.put("/api/v1/queues/cv", json=body), 422)
            assert error["field"] == field, (body, error)
        over = _error(root.put("/api/v1/queues/cv", json={"systems": 2}), 422)
        assert "add up to 5 systems; the pool has 4" in over["message"]
        assert "cv" not in {q["name"] for q in root.get("/api/v1/queues").json()["queues"]}

        made = root.put("/api/v1/queues/cv", json={"systems": 1, "borrow_systems": 1})
        assert made.status_code == 200, made.text
        assert (made.json()["quota_systems"], made.json()["source"]) == (1, "admin")
        changed = root.put("/api/v1/queues/cv", json={"borrow_systems": "unlimited"}).json()
        assert (changed["systems"], changed["borrow_systems"]) == (1, None)  # the rest is kept

        assert _error(root.delete("/api/v1/queues/default"), 409)["field"] == "queue"
        assert _error(root.delete("/api/v1/queues/robotics"), 404)["field"] == "queue"
        assert alice.post("/api/v1/jobs", json=BODY | {"queue": "nlp"}).status_code == 201
        assert "waiting" in _error(root.delete("/api/v1/queues/nlp"), 409)["message"]
        assert root.delete("/api/v1/queues/cv").status_code == 204

        # A job the queue's limits can never let run is refused at submit, naming num_csx.
        limited = root.put("/api/v1/queues/vision", json={"borrow_systems": 0})
        assert limited.status_code == 200, limited.text
        never = _error(
            root.post("/api/v1/jobs", json=BODY | {"queue": "vision", "num_csx": 2}), 422
        )
        assert never["field"] == "num_csx" and "at most 1 system" in never["message"]


def test_usage_rejects_a_bad_window(secured: tuple[RunningCoordinator, dict[str, str]]) -> None:
    running, tokens = secured
    with _client(running, tokens["bob"]) as bob:
        ok = bob.get("/api/v1/usage", params={"by": "queue"})
        assert ok.status_code == 200 and ok.json()["by"] == "queue"
        assert _error(bob.get("/api/v1/usage", params={"by": "planet"}), 422)["field"]
        backwards = {"since": 2_000_000_000, "until": 1_900_000_000}
        assert _error(bob.get("/api/v1/usage", params=backwards), 422)["field"] == "since"
        week = bob.get("/api/v1/usage", params={"since": "7d", "until": "2026-11-01T00:00Z"})
        assert week.status_code == 422  # a week before now is after 1 Nov: a backwards window
        assert bob.get("/api/v1/usage", params={"since": "2026-10-01"}).status_code == 200
        vague = _error(bob.get("/api/v1/usage", params={"since": "last tuesday"}), 422)
        assert vague["field"] == "since" and "is not a time" in vague["message"]


def test_grpc_says_the_same(secured: tuple[RunningCoordinator, dict[str, str]]) -> None:
    running, tokens = secured
    with secure_channel(running.address) as channel:
        stub = cluster_pb2_grpc.ClusterServiceStub(channel)

        def call(method: Any, request: Any, user: str) -> Any:
            return method(request, metadata=[bearer_metadata(tokens[user])], timeout=30)

        queues = call(stub.ListQueues, cluster_pb2.ListQueuesRequest(), "bob").queues
        assert {q.name for q in queues} >= {"default", "nlp", "vision"}
        for request, user, code in (
            (cluster_pb2.SetQueueRequest(name="cv", systems=1), "bob", "PERMISSION_DENIED"),
            (cluster_pb2.SetQueueRequest(name="cv", memoryx="x"), "root", "INVALID_ARGUMENT"),
            (cluster_pb2.SetQueueRequest(name="Bad Name"), "root", "INVALID_ARGUMENT"),
        ):
            with pytest.raises(grpc.RpcError) as caught:
                call(stub.SetQueue, request, user)
            assert caught.value.code().name == code, caught.value.details()
        spec = cluster_pb2.JobSpec(params_yaml=SMALL_PARAMS, num_csx=1, num_steps=2, queue="nlp")
        with pytest.raises(grpc.RpcError) as denied:
            call(stub.SubmitJob, cluster_pb2.SubmitJobRequest(spec=spec), "bob")
        assert denied.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert "queue nlp" in (denied.value.details() or "")
        with pytest.raises(grpc.RpcError) as bad:
            call(stub.GetUsage, cluster_pb2.GetUsageRequest(by="planet"), "bob")
        assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_a_queues_caps_per_user_are_set_shown_and_kept(
    secured: tuple[RunningCoordinator, dict[str, str]],
) -> None:
    """#37: an admin sets a queue's caps per user (REST, gRPC, csctl); a bad one is refused
    naming its field with nothing stored; over the queued cap a submit is refused naming the
    queue and the cap."""
    running, tokens = secured
    caps = {"max_running_jobs_per_user": 1, "max_queued_jobs_per_user": 2}
    with _client(running, tokens["alice"]) as alice, _client(running, tokens["root"]) as root:
        made = root.put("/api/v1/queues/capped", json={"systems": 0, **caps})
        assert made.status_code == 200, made.text
        assert {k: made.json()[k] for k in caps} == caps
        assert made.json()["max_systems_per_user"] is None
        for body, field in (
            ({"max_running_jobs_per_user": -1}, "max_running_jobs_per_user"),
            ({"max_queued_jobs_per_user": "lots"}, "max_queued_jobs_per_user"),
            ({"max_systems_per_user": 10**7}, "max_systems_per_user"),
        ):
            error = _error(root.put("/api/v1/queues/capped", json=body), 422)
            assert error["field"] == field and "\n" not in error["message"], (body, error)
        listed = {q["name"]: q for q in alice.get("/api/v1/queues").json()["queues"]}
        assert {k: listed["capped"][k] for k in caps} == caps  # nothing changed

        submitted = [alice.post("/api/v1/jobs", json=BODY | {"queue": "capped"}) for _ in range(2)]
        assert [r.status_code for r in submitted] == [201, 201]
        over = _error(alice.post("/api/v1/jobs", json=BODY | {"queue": "capped"}), 429)
        assert "2 jobs waiting in queue capped" in over["message"]
        assert "per user in that queue is 2" in over["message"]

    with secure_channel(running.address) as channel:
        stub = cluster_pb2_grpc.ClusterServiceStub(channel)
        root_md = (bearer_metadata(tokens["root"]),)
        with pytest.raises(grpc.RpcError) as bad:
            stub.SetQueue(
                cluster_pb2.SetQueueRequest(name="capped", max_systems_per_user="-3"),
                metadata=root_md,
            )
        assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "max_systems_per_user must be a whole number" in (bad.value.details() or "")
        queue = stub.SetQueue(
            cluster_pb2.SetQueueRequest(
                name="capped", max_systems_per_user="1", max_queued_jobs_per_user="unlimited"
            ),
            metadata=root_md,
        )
        assert (queue.max_running_jobs_per_user, queue.max_systems_per_user) == (1, 1)
        assert not queue.HasField("max_queued_jobs_per_user")

    csctl = CliRunner().invoke(
        cli,
        ["--server", running.address, "--token", tokens["root"], "queue", "set", "capped",
         "--max-running-jobs-per-user", "2"],
    )  # fmt: skip
    assert csctl.exit_code == 0, csctl.output
    assert "running=2,systems=1" in csctl.output  # PER-USER of the wide row
    shown = CliRunner().invoke(
        cli,
        ["--server", running.address, "--token", tokens["root"], "get", "queues", "-o", "yaml"],
    )
    capped = next(q for q in yaml.safe_load(shown.output) if q["name"] == "capped")
    assert (capped["max_running_jobs_per_user"], capped["max_queued_jobs_per_user"]) == (2, None)
    refused = CliRunner().invoke(
        cli,
        ["--server", running.address, "--token", tokens["root"], "queue", "set", "capped",
         "--max-systems-per-user", "-1"],
    )  # fmt: skip
    assert refused.exit_code == 1 and "max_systems_per_user" in refused.output
    with _client(running, tokens["root"]) as root:
        for job in submitted:
            root.post(f"/api/v1/jobs/{job.json()['id']}/cancel", json={})


def test_only_admins_book_reservations_through_rest_and_grpc(
    secured: tuple[RunningCoordinator, dict[str, str]],
) -> None:
    running, tokens = secured
    now = time.time()
    window = {"start": now + 3600, "end": now + 7200}
    with _client(running, tokens["alice"]) as alice, _client(running, tokens["root"]) as root:
        body = {"name": "fans", "systems": ["cs2-02"], "maint": True, **window}
        assert _error(alice.post("/api/v1/reservations", json=body), 403)["field"] == "name"
        for bad, field in (
            ({"start": now - 7200, "end": now - 3600}, "end"),
            ({"systems": ["cs2-99"]}, "systems"),
            ({"systems": 9}, "systems"),
            ({"name": "Fans!"}, "name"),
        ):
            error = _error(root.post("/api/v1/reservations", json=body | bad), 422)
            assert error["field"] == field and "\n" not in error["message"], (bad, error)
        assert alice.get("/api/v1/reservations").json()["reservations"] == []
        made = root.post("/api/v1/reservations", json=body)
        assert made.status_code == 201, made.text
        assert made.json()["nodes"] == ["cs2-02"] and made.json()["state"] == "INACTIVE"
        over = {"name": "team", "systems": ["cs2-02"], "users": ["alice"], **window}
        assert _error(root.post("/api/v1/reservations", json=over), 409)["field"] == "start"
        listed = alice.get("/api/v1/reservations").json()["reservations"]
        assert [r["name"] for r in listed] == ["fans"]
    with secure_channel(running.address) as channel:
        stub = cluster_pb2_grpc.ClusterServiceStub(channel)

        def call(method: Any, request: Any, user: str) -> Any:
            return method(request, metadata=[bearer_metadata(tokens[user])], timeout=30)

        request = cluster_pb2.CreateReservationRequest(
            name="team", system_count=1, users=["alice"], **window
        )
        with pytest.raises(grpc.RpcError) as denied:
            call(stub.CreateReservation, request, "bob")
        assert denied.value.code() is grpc.StatusCode.PERMISSION_DENIED
        made = call(stub.CreateReservation, request, "root")
        assert list(made.nodes) == ["cs2-01"] and made.creator == "root"
        nodes = {
            n.name: n.reservation
            for n in call(stub.ListNodes, cluster_pb2.ListNodesRequest(), "bob").nodes
        }
        assert (nodes["cs2-01"], nodes["cs2-02"], nodes["cs2-03"]) == ("team", "fans", "")
        with pytest.raises(grpc.RpcError) as refused:
            call(stub.DeleteReservation, cluster_pb2.DeleteReservationRequest(name="team"), "bob")
        assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
        for name in ("team", "fans"):
            call(stub.DeleteReservation, cluster_pb2.DeleteReservationRequest(name=name), "root")
        listed = call(stub.ListReservations, cluster_pb2.ListReservationsRequest(), "bob")
        assert list(listed.reservations) == []
