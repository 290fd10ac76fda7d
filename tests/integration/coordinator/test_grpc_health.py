"""gRPC health checking and server reflection over a real channel: what grpcurl and a Kubernetes
gRPC probe call. Health follows readiness: SERVING while the coordinator serves, NOT_SERVING
on a standby of a highly available pair and once the coordinator stops."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from appliance.client import ApplianceClient
from appliance.domain.errors import Unauthenticated
from tests.integration.coordinator.harness import RunningCoordinator, user_tokens, wait_until
from tests.postgres import PostgresServer
from tests.tls import secure_channel

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
CLUSTER = "appliance.v1.ClusterService"
CONTROL = "appliance.v1.ReplicaControl"


def check(address: str, service: str = "") -> int:
    with secure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        answer = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        return int(answer.status)


def test_health_check_and_watch_until_the_coordinator_stops(tmp_path: Path) -> None:
    running = RunningCoordinator(tmp_path / "data").start()
    try:
        for service in ("", CLUSTER, CONTROL):
            assert check(running.address, service) == SERVING
        with secure_channel(running.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            with pytest.raises(grpc.RpcError) as unknown:
                stub.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=10)
            assert unknown.value.code() is grpc.StatusCode.NOT_FOUND
            watch = stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=30)
            assert next(watch).status == SERVING
            running.stop()  # a graceful stop: watchers hear NOT_SERVING before calls end
            assert next(watch).status == NOT_SERVING
            watch.cancel()
    finally:
        running.stop()


def reflected_services(address: str) -> set[str]:
    with secure_channel(address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        (answer,) = list(stub.ServerReflectionInfo(iter([request]), timeout=10))
        return {s.name for s in answer.list_services_response.service}


def test_reflection_lists_and_describes_the_services(tmp_path: Path) -> None:
    running = RunningCoordinator(tmp_path / "data").start()
    try:
        assert reflected_services(running.address) >= {
            CLUSTER, CONTROL, "grpc.health.v1.Health",
            "grpc.reflection.v1alpha.ServerReflection",
        }  # fmt: skip
        with secure_channel(running.address) as channel:
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            request = reflection_pb2.ServerReflectionRequest(file_containing_symbol=CLUSTER)
            (answer,) = list(stub.ServerReflectionInfo(iter([request]), timeout=10))
        described = answer.file_descriptor_response.file_descriptor_proto
        assert described and any(b"SubmitJob" in proto for proto in described)
    finally:
        running.stop()


def test_probes_need_no_token_when_authentication_is_on(tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens.yaml"
    user_tokens(tokens_file, ["alice"])
    running = RunningCoordinator(tmp_path / "data", auth_tokens_file=tokens_file).start()
    try:
        assert check(running.address) == SERVING
        assert CLUSTER in reflected_services(running.address)
        with ApplianceClient(running.address) as client, pytest.raises(Unauthenticated):
            client.list_jobs()  # the API itself still wants a token
    finally:
        running.stop()


@pytest.fixture
def pair(postgres: PostgresServer, tmp_path: Path) -> Iterator[list[RunningCoordinator]]:
    """Two coordinators electing a leader in one PostgreSQL database: the first leads. The
    lease is long enough that a busy machine never makes the leader miss a renewal (a stop
    releases it, so the standby still takes over at once)."""
    with postgres.fresh_database() as url, contextlib.ExitStack() as stack:
        coordinators = []
        for name in ("first", "second"):
            running = RunningCoordinator(
                tmp_path / name, database_url=url, leader_election="database",
                coordinator_id=name, lease_duration_seconds=30.0,
                lease_renew_deadline_seconds=20.0, lease_retry_period_seconds=0.2,
            ).start()  # fmt: skip
            stack.callback(running.stop)
            coordinators.append(running)
        yield coordinators


@pytest.mark.postgres
def test_a_standby_is_not_serving_until_it_leads(pair: list[RunningCoordinator]) -> None:
    leader, standby = pair
    assert check(leader.address) == SERVING
    assert check(standby.address) == NOT_SERVING
    assert check(standby.address, CLUSTER) == NOT_SERVING
    ready = httpx.get(f"https://127.0.0.1:{standby.coordinator.http_port}/readyz", timeout=10)
    assert ready.status_code == 503  # health says what /readyz says
    for running, serving in ((leader, 1.0), (standby, 0.0)):
        url = f"https://127.0.0.1:{running.coordinator.http_port}/metrics"
        scraped = httpx.get(url, timeout=10).text
        assert f"appliance_coordinator_serving {serving}" in scraped.splitlines()
    with secure_channel(standby.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        watch = stub.Watch(health_pb2.HealthCheckRequest(service=CLUSTER), timeout=60)
        assert next(watch).status == NOT_SERVING
        leader.stop()  # releases its lease: the standby takes office
        assert next(watch).status == SERVING
        watch.cancel()
    wait_until(lambda: check(standby.address) == SERVING, 10, "the new leader serving")
