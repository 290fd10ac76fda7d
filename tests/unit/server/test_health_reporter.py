"""The health reporter sets every service's status from readiness, and a readiness probe that
fails is NOT_SERVING, never a dead reporter."""

from __future__ import annotations

from grpc_health.v1 import health_pb2
from grpc_health.v1.health import aio as health_aio

from appliance.server.grpc.health import NOT_SERVING, SERVING, HealthReporter

SERVICES = ("appliance.v1.ClusterService", "appliance.v1.ReplicaControl")


async def statuses(servicer: health_aio.HealthServicer) -> dict[str, int]:
    found = {}
    for name in ("", *SERVICES):
        answer = await servicer.Check(health_pb2.HealthCheckRequest(service=name), None)
        found[name] = answer.status
    return found


async def test_statuses_follow_readiness_and_a_failed_probe_is_not_serving() -> None:
    servicer = health_aio.HealthServicer()
    answers: list[str | Exception | None] = [None, "the store is unavailable", None, OSError()]

    async def problem() -> str | None:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    reporter = HealthReporter(servicer, problem, SERVICES)
    expected = [SERVING, NOT_SERVING, SERVING, NOT_SERVING]
    for status in expected:
        await reporter.update()
        assert set((await statuses(servicer)).values()) == {status}
    await reporter.stop()
    await servicer.set("", SERVING)  # once stopped, for good
    assert set((await statuses(servicer)).values()) == {NOT_SERVING}
