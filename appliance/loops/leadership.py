"""The elector: campaign for the lease, keep it, notice when it is lost (client-go's algorithm
over a LeaseLock; the guarantees are in domain/leadership.py).

A round reads the lease, then creates it, renews it (when held) or takes it over (when it is
released, or stayed unchanged for its whole duration on this coordinator's own clock). A
renewal counts from when its round began. The holder is told (`Leadership.renewed`) until when
it may act; it is lost when a renewal is refused (someone else wrote the lease) or when the
renew deadline passes without one: `run` then returns and the caller stops acting at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from appliance.domain.leadership import LeaseLock, LeaseRecord, LeaseTiming
from appliance.services.leadership import Leadership

log = logging.getLogger(__name__)


class LeaderElector:
    def __init__(
        self,
        lock: LeaseLock,
        leadership: Leadership,
        timing: LeaseTiming,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lock = lock
        self.leadership = leadership
        self.identity = leadership.identity
        self.timing = timing
        self.clock = clock
        self.epoch: int | None = None  # held, as of the last round
        self._valid_until = 0.0
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0
        self._last_epoch: int | None = None  # the epoch of the term `run` keeps

    def holding(self) -> bool:
        """Whether the lease is held and its renew deadline has not passed."""
        return self.epoch is not None and self.clock() < self._valid_until

    async def try_acquire_or_renew(self) -> bool:
        """One round; whether this coordinator holds the lease after it."""
        began = self.clock()
        record = await self.lock.read()
        if record is None:
            made = await self.lock.create(LeaseRecord(self.identity, 1, self.timing.duration))
            return self._won(made, began)
        if self._observed is None or record.version != self._observed.version:
            self._observed, self._observed_at = record, began
        ours = self.epoch is not None and (record.holder, record.epoch) == (
            self.identity,
            self.epoch,
        )
        if not ours:
            if self.epoch is not None:  # someone else took it: stop acting now
                self.leadership.step_down()
            self.epoch = None
            if not record.released and began < self._observed_at + record.duration:
                self.leadership.saw(record.holder, record.epoch)
                return False
        epoch = record.epoch if ours else record.epoch + 1
        wanted = LeaseRecord(self.identity, epoch, self.timing.duration)
        return self._won(await self.lock.update(wanted, record.version), began)

    def _won(self, record: LeaseRecord | None, began: float) -> bool:
        if record is None:  # someone else wrote first
            if self.epoch is not None:  # it was ours: stop acting now, not at the deadline
                self.leadership.step_down()
            self.epoch = None
            return False
        if self.epoch != record.epoch:
            log.info("acquired the %s (epoch %d)", self.lock.description, record.epoch)
        self.epoch = record.epoch
        self._observed, self._observed_at = record, began
        self._valid_until = began + self.timing.renew_deadline
        self.leadership.renewed(record.epoch, self._valid_until)
        return True

    async def run(self, elected: Callable[[int], None], *, won: bool = False) -> None:
        """Campaign until elected (then call `elected(epoch)` once), keep the lease, and return
        as soon as it is lost. Never returns while it is held. `won`: elected already (by a
        round of the caller's), so keep the lease."""
        if won:
            self._last_epoch = self.epoch
            await asyncio.sleep(self.timing.retry_period)
        while True:
            if won and not self.holding():  # e.g. paused past the deadline: no round first
                log.error("lost the %s (epoch %s)", self.lock.description, self._last_epoch)
                return
            limit = self._valid_until - self.clock() if won else self.timing.renew_deadline
            try:
                async with asyncio.timeout(max(limit, 0.01)):
                    await self.try_acquire_or_renew()
            except Exception as exc:  # the lock's store is unreachable: try again
                log.warning("leader election round failed: %s", str(exc) or type(exc).__name__)
                if not won:
                    self.epoch = None
            if not won and self.holding():
                won = True
                self._last_epoch = self.epoch
                elected(self._last_epoch or 0)
            if not won or self.holding():
                await asyncio.sleep(self.timing.retry_period)

    async def release(self) -> None:
        """Give the lease up (on a clean stop) so a standby takes over at once."""
        if self.epoch is None or self._observed is None:
            return
        epoch, self.epoch = self.epoch, None
        released = LeaseRecord("", epoch, self.timing.duration)
        try:
            async with asyncio.timeout(self.timing.renew_deadline):
                await self.lock.update(released, self._observed.version)
        except Exception as exc:
            log.warning("could not release the %s: %s", self.lock.description, exc)
