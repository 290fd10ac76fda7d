"""What the elector relies on from every LeaseLock (domain/leadership.py), run against each
implementation: the lease row in SQLite and PostgreSQL (tests/integration/store) and the
Kubernetes Lease through the chart's Role (tests/integration/kubernetes). Two handles on one
lease stand for two coordinators; their clocks are injected."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from appliance.domain.leadership import LeaseLock, LeaseRecord, LeaseTiming
from appliance.loops.leadership import LeaderElector
from appliance.services.leadership import Leadership

TIMING = LeaseTiming(duration=8.0, renew_deadline=5.0, retry_period=1.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(lock: LeaseLock, name: str, clock: Clock) -> LeaderElector:
    leadership = Leadership(name, elected=True, clock=clock)
    return LeaderElector(lock, leadership, TIMING, clock)


class LeaseLockContract:
    @pytest.fixture
    def handle(self) -> Callable[[], LeaseLock]:
        """A new handle on one and the same (absent) lease, per call."""
        raise NotImplementedError

    async def test_no_record_until_one_is_created(self, handle: Callable[[], LeaseLock]) -> None:
        assert await handle().read() is None

    async def test_only_the_first_create_wins(self, handle: Callable[[], LeaseLock]) -> None:
        a, b = handle(), handle()
        made = await a.create(LeaseRecord("a", 1, 8.0))
        assert made is not None and (made.holder, made.epoch) == ("a", 1)
        assert await b.create(LeaseRecord("b", 1, 8.0)) is None
        read = await b.read()
        assert read is not None and (read.holder, read.epoch, read.duration) == ("a", 1, 8.0)

    async def test_update_only_from_the_version_read(
        self, handle: Callable[[], LeaseLock]
    ) -> None:
        a, b = handle(), handle()
        await a.create(LeaseRecord("a", 1, 8.0))
        seen_a, seen_b = await a.read(), await b.read()
        assert seen_a is not None and seen_b is not None
        renewed = await a.update(LeaseRecord("a", 1, 8.0), seen_a.version)
        assert renewed is not None and renewed.version != seen_a.version
        # b decided on the record before a's renewal: refused, the lease stays a's.
        assert await b.update(LeaseRecord("b", 2, 8.0), seen_b.version) is None
        now = await b.read()
        assert now is not None and (now.holder, now.epoch, now.version) == (
            "a",
            1,
            renewed.version,
        )

    async def test_a_standby_takes_over_a_lease_left_unrenewed(
        self, handle: Callable[[], LeaseLock]
    ) -> None:
        clock_a, clock_b = Clock(), Clock()
        a, b = elector(handle(), "a", clock_a), elector(handle(), "b", clock_b)
        assert await a.try_acquire_or_renew()
        assert a.leadership.epoch() is None  # elected, but not in office yet
        assert not await b.try_acquire_or_renew()
        assert b.leadership.leader == "a"
        for _ in range(3):  # renewed every second: b never sees it expire
            clock_a.now += 1
            clock_b.now += 1
            assert await a.try_acquire_or_renew()
            assert not await b.try_acquire_or_renew()
        clock_a.now += 6  # a is paused: past its renew deadline it holds nothing
        assert not a.holding()
        clock_b.now += TIMING.duration - 1
        assert not await b.try_acquire_or_renew()  # 7 s unchanged: not yet
        clock_b.now += 1
        assert await b.try_acquire_or_renew()
        assert b.epoch == 2
        # a wakes up: its renewal is refused, and it holds no epoch.
        assert not await a.try_acquire_or_renew()
        assert a.epoch is None and not a.holding()

    async def test_a_released_lease_is_taken_at_once(
        self, handle: Callable[[], LeaseLock]
    ) -> None:
        clock = Clock()
        a, b = elector(handle(), "a", clock), elector(handle(), "b", clock)
        assert await a.try_acquire_or_renew()
        assert not await b.try_acquire_or_renew()
        await a.release()
        assert await b.try_acquire_or_renew()
        assert b.epoch == 2
