"""Per-user limits on a real coordinator: a user's stream over their cap refused with
RESOURCE_EXHAUSTED while another user's opens, REST's 429 with Retry-After, a submit over the
queued cap refused naming it, and `csctl get limits` showing the caps and their use."""

from __future__ import annotations

import getpass
import json
import math
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import httpx
import pytest
from click.testing import CliRunner

from appliance._proto.v1 import cluster_pb2 as pb
from appliance._proto.v1 import cluster_pb2_grpc
from appliance.client import ApplianceClient
from appliance.domain.audit import AuditEvent, Door, Outcome
from appliance.domain.errors import LimitExceeded
from appliance.domain.inventory import NodeState
from appliance.services.audit import LIMIT_VERB
from csctl.cli import cli
from tests.integration.coordinator.harness import RunningCoordinator, user_tokens, wait_until
from tests.tls import secure_channel

PARAMS = "model:\n  name: fc_mnist\n  hidden_sizes: [8]\n"
SYSTEMS = ["cs2-01", "cs2-02", "cs2-03", "cs2-04"]


def start(
    tmp_path: Path, limits: str, *, tokens: bool
) -> tuple[RunningCoordinator, dict[str, str]]:
    (tmp_path / "limits.yaml").write_text(limits)
    extra: dict[str, object] = {"limits_file": tmp_path / "limits.yaml"}
    found: dict[str, str] = {}
    if tokens:
        found = user_tokens(tmp_path / "tokens.yaml")
        extra["auth_tokens_file"] = tmp_path / "tokens.yaml"
    running = RunningCoordinator(tmp_path / "data", **extra).start()
    running.coordinator.ctx.store.set_node_state(SYSTEMS, NodeState.MAINTENANCE)  # all wait
    return running, found


@pytest.fixture
def streams(tmp_path: Path) -> Iterator[tuple[RunningCoordinator, dict[str, str]]]:
    running, tokens = start(tmp_path, "defaults: {streams: 2}\n", tokens=True)
    try:
        yield running, tokens
    finally:
        running.stop()


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def test_a_users_stream_over_the_cap_is_refused_while_another_users_opens(
    streams: tuple[RunningCoordinator, dict[str, str]],
) -> None:
    running, tokens = streams
    limits = running.coordinator.parts.uses.limits
    with secure_channel(running.address) as channel:
        stub = cluster_pb2_grpc.ClusterServiceStub(channel)
        job = stub.SubmitJob(
            pb.SubmitJobRequest(spec=pb.JobSpec(params_yaml=PARAMS, num_csx=1, num_steps=2)),
            metadata=bearer(tokens["alice"]),
        )
        alice = [stub.WatchJobs(pb.ListJobsRequest(), metadata=bearer(tokens["alice"]))
                 for _ in range(2)]  # fmt: skip
        for call in alice:
            next(call)  # open: its first page came
        third = stub.WatchJob(pb.WatchJobRequest(job_id=job.id), metadata=bearer(tokens["alice"]))
        with pytest.raises(grpc.RpcError) as info:
            next(third)
        assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "alice has 2 streams open" in info.value.details()
        assert ("retry-after", "5") in tuple(info.value.trailing_metadata())
        bob = stub.WatchJobs(pb.ListJobsRequest(), metadata=bearer(tokens["bob"]))
        assert next(bob) is not None  # bob's cap is his own

        # REST's event stream and followed log count against the same cap: 429.
        http = httpx.Client(base_url=f"https://127.0.0.1:{running.coordinator.http_port}")
        headers = {"authorization": f"Bearer {tokens['alice']}"}
        for path in (
            f"/api/v1/jobs/{job.id}/events/stream",
            f"/api/v1/jobs/{job.id}/logs?follow=true",
        ):
            answer = http.get(path, headers=headers)
            assert answer.status_code == 429, answer.text
            assert answer.headers["retry-after"] == "5"
            assert "limit of streams per user is 2" in answer.json()["error"]["message"]

        alice[0].cancel()  # a stream that ends gives its slot back
        wait_until(lambda: limits.streams_open("alice") == 1, 10, "alice's stream to end")
        with http.stream("GET", f"/api/v1/jobs/{job.id}/events/stream", headers=headers) as sse:
            assert sse.status_code == 200
            wait_until(lambda: limits.streams_open("alice") == 2, 10, "the SSE stream's slot")
        wait_until(lambda: limits.streams_open("alice") == 1, 10, "the SSE stream to end")
        for call in (alice[1], bob):
            call.cancel()
        http.close()
    metrics = running.coordinator.parts.ctx.metrics.registry
    for door, count in (("grpc", 1.0), ("rest", 2.0)):
        sample = {"limit": "streams", "door": door}
        assert metrics.get_sample_value("appliance_limit_refusals_total", sample) == count


def test_rest_answers_429_with_retry_after_by_the_claimed_user_when_auth_is_off(
    tmp_path: Path,
) -> None:
    running, _ = start(tmp_path, "defaults: {requests_per_second: 0.01, burst: 3}\n", tokens=False)
    try:
        http = httpx.Client(base_url=f"https://127.0.0.1:{running.coordinator.http_port}")
        dave = {"x-appliance-user": "dave"}
        assert [http.get("/api/v1/jobs", headers=dave).status_code for _ in range(3)] == [200] * 3
        refused = http.get("/api/v1/jobs", headers=dave)
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) >= 1
        error = refused.json()["error"]
        assert error["code"] == "too_many_requests"
        assert error["message"].startswith("dave is over the request rate limit (0.01 requests")
        assert http.get("/api/v1/jobs", headers={"x-appliance-user": "erin"}).status_code == 200
        assert http.get("/healthz", headers=dave).status_code == 200  # probes are not limited
        http.close()

        # csctl: one line, no traceback, exit 1 (its calls claim this process's user).
        runner = CliRunner()
        for _ in range(3):
            runner.invoke(cli, ["--server", running.address, "get", "jobs"])
        result = runner.invoke(cli, ["--server", running.address, "get", "jobs"])
        assert result.exit_code == 1
        assert result.stderr.startswith(f"error: {getpass.getuser()} is over the request rate")
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.output
    finally:
        running.stop()


def test_a_submit_over_the_queued_cap_is_refused_and_csctl_shows_the_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CSCTL_SERVER", raising=False)
    limits = (
        "defaults: {queued_jobs: 2, streams: 7}\nqueues: {default: {queued_jobs_per_user: 5}}\n"
    )
    running, _ = start(tmp_path, limits, tokens=False)
    try:
        params = tmp_path / "params.yaml"
        params.write_text(PARAMS)
        with ApplianceClient(running.address, detach=True) as client:
            for _ in range(2):
                client.submit(params=params, num_csx=1, num_steps=2)
            with pytest.raises(LimitExceeded) as info:
                client.submit(params=params, num_csx=1, num_steps=2)
            assert info.value.message == (
                f"{getpass.getuser()} has 2 jobs waiting to run, the limit of queued jobs per "
                "user is 2; wait for some to start or cancel some, then submit again"
            )
            assert info.value.retry_after == 30
        result = CliRunner().invoke(cli, ["--server", running.address, "get", "limits"])
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert lines[0] == f"limits of {getpass.getuser()} (on)"
        assert lines[1].split() == ["LIMIT", "CAP", "USED"]
        assert lines[2].split() == ["streams", "7", "0"]
        assert lines[4].split() == ["queued", "jobs", "2", "2"]
        assert lines[5].split() == ["queued", "jobs", "in", "default", "5", "2"]
        as_json = CliRunner().invoke(
            cli, ["--server", running.address, "get", "limits", "-o", "json"]
        )
        document = json.loads(as_json.stdout)
        assert document["caps"]["queued_jobs"] == 2 and document["queued_by_queue"] == {
            "default": 2
        }
        http = httpx.Client(base_url=f"https://127.0.0.1:{running.coordinator.http_port}")
        rest = http.get("/api/v1/limits", params={"user": "erin"}).json()
        assert (rest["user"], rest["queued_jobs"], rest["caps"]["streams"]) == ("erin", 0, 7)
        http.close()
    finally:
        running.stop()


def test_a_burst_over_the_rate_leaves_bounded_audit_records_naming_user_and_limit(
    tmp_path: Path,
) -> None:
    limits = "defaults: {requests_per_second: 0.01, burst: 1}\nusers: {root: {burst: 1000}}\n"
    running, tokens = start(tmp_path, limits, tokens=True)
    burst = 40
    began = time.monotonic()
    try:
        with secure_channel(running.address) as channel:
            stub = cluster_pb2_grpc.ClusterServiceStub(channel)
            calls = [
                stub.ListJobs.future(pb.ListJobsRequest(), metadata=bearer(tokens["alice"]))
                for _ in range(burst)
            ]
            codes = [_code(call) for call in calls]
        http = httpx.Client(base_url=f"https://127.0.0.1:{running.coordinator.http_port}")
        with ThreadPoolExecutor(burst) as pool:
            answers = list(pool.map(
                lambda _: http.get("/api/v1/jobs", headers={
                    "authorization": f"Bearer {tokens['alice']}"}).status_code,
                range(burst),
            ))  # fmt: skip
        http.close()
        refused = {
            "grpc": codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED),
            "rest": answers.count(429),
        }
        assert refused["grpc"] >= burst - 1 and refused["rest"] == burst

        def alices() -> list[AuditEvent]:
            with ApplianceClient(running.address, token=tokens["root"]) as root:
                return root.audit_events(user="alice", limit=1000)

        def accounted(door: str) -> int:
            """The refusals the records of `door` stand for: one each, and the counts."""
            return sum(
                int(e.reason.split()[0]) if e.verb == LIMIT_VERB else 1
                for e in alices()
                if e.door.value == door
            )

        took = time.monotonic() - began
        wait_until(lambda: accounted("grpc") == refused["grpc"], 15, "gRPC's counts")
        wait_until(lambda: accounted("rest") == refused["rest"], 15, "REST's counts")
        events = alices()
        # Two records a second at most per door (refusals are held a second): not 80.
        most = 2 * (math.ceil(took) + 1)
        for door in Door.GRPC, Door.REST:
            mine = [(e.verb, e.reason) for e in events if e.door is door]
            assert len(mine) <= most, mine
        for event in events:
            assert event.outcome is Outcome.REFUSED and event.user == "alice"
            assert "requests_per_second" in event.reason
        firsts = [e for e in events if e.verb != LIMIT_VERB]
        assert {e.door for e in firsts} == {Door.GRPC, Door.REST}
        everything = json.dumps([e.document() for e in events])
        assert not any(token in everything for token in tokens.values())
    finally:
        running.stop()


def _code(call: grpc.Future) -> grpc.StatusCode:
    try:
        call.result()
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK
