"""The elector's timing on an injected clock, over an in-memory LeaseLock (our own seam; the
real locks keep the same contract in tests/integration), and what a coordinator is while it
stands by, leads or was paused past its renew deadline."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from appliance.domain.leadership import LeaseLock, LeaseRecord, LeaseTiming
from appliance.services.leadership import Leadership
from tests.integration.lease_contract import Clock, LeaseLockContract, elector


class MemoryLeaseLock:
    """One lease in a dict shared by every handle; the version counts writes."""

    def __init__(self, shared: dict[str, LeaseRecord]) -> None:
        self.shared = shared

    @property
    def description(self) -> str:
        return "lease in memory"

    async def read(self) -> LeaseRecord | None:
        return self.shared.get("lease")

    async def create(self, record: LeaseRecord) -> LeaseRecord | None:
        if "lease" in self.shared:
            return None
        self.shared["lease"] = dataclasses.replace(record, version="1")
        return self.shared["lease"]

    async def update(self, record: LeaseRecord, version: str) -> LeaseRecord | None:
        current = self.shared.get("lease")
        if current is None or current.version != version:
            return None
        self.shared["lease"] = dataclasses.replace(record, version=str(int(version) + 1))
        return self.shared["lease"]


class TestMemoryLeaseLock(LeaseLockContract):
    @pytest.fixture
    def handle(self) -> Callable[[], LeaseLock]:
        shared: dict[str, LeaseRecord] = {}
        return lambda: MemoryLeaseLock(shared)


def test_a_lease_timing_that_lets_two_act_is_refused() -> None:
    with pytest.raises(ValueError, match="renew deadline < duration"):
        LeaseTiming(duration=5.0, renew_deadline=5.0, retry_period=1.0)
    with pytest.raises(ValueError):
        LeaseTiming(duration=8.0, renew_deadline=5.0, retry_period=5.0)


async def test_a_leader_paused_past_its_renew_deadline_holds_no_epoch() -> None:
    clock = Clock()
    leader = elector(MemoryLeaseLock({}), "a at 127.0.0.1:1", clock)
    leadership = leader.leadership
    assert leadership.problem() == (
        "this coordinator is a standby and no leader is elected yet; retry in a few seconds"
    )
    assert await leader.try_acquire_or_renew()
    leadership.take_office()
    assert leadership.epoch() == 1 and leadership.acting()
    leadership.serve()
    assert leadership.problem() is None
    clock.now += 4.9
    assert leadership.epoch() == 1
    clock.now += 0.1  # the renew deadline: before any other may take over (8 s)
    assert leadership.epoch() is None and not leadership.acting()
    assert leadership.problem() is not None and "stepping down" in leadership.problem()


async def test_a_standby_says_who_leads() -> None:
    shared: dict[str, LeaseRecord] = {}
    clock = Clock()
    leader = elector(MemoryLeaseLock(shared), "a at 127.0.0.1:1", clock)
    standby = elector(MemoryLeaseLock(shared), "b at 127.0.0.1:2", clock)
    assert await leader.try_acquire_or_renew()
    assert not await standby.try_acquire_or_renew()
    assert not standby.leadership.acting()
    assert standby.leadership.problem() == (
        "this coordinator is a standby; the leader is a at 127.0.0.1:1 (epoch 1): retry "
        "through the appliance's Service address, or at the leader"
    )


def test_the_only_coordinator_always_acts() -> None:
    only = Leadership()
    assert only.acting() and only.problem() is None and only.epoch() is None
