"""Leader election run over the wired parts: stand by until elected, take office (raise the
store's fence, adopt what runs, start the loops), and on losing the lease stop acting at once.

Several coordinators on one PostgreSQL store elect a leader (loops/leadership.py): each serves
its doors at once, refusing callers while it stands by; the one elected raises the store's
fence to its epoch, adopts the replicas, and only then schedules and reconciles. One that loses
its lease stops its loops at once and `stepped_down` is set: the process exits, and starts
again as a standby.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from appliance.composition.backends import StartupError
from appliance.composition.root import Parts
from appliance.config import Settings
from appliance.loops.leadership import LeaderElector

log = logging.getLogger(__name__)
Spawn = Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]]


class Office:
    """The election of one coordinator: `spawn` runs its loops as tasks, `tasks` are what
    stepping down cancels."""

    def __init__(
        self,
        parts: Parts,
        spawn: Spawn,
        tasks: list[asyncio.Task[None]],
        stepped_down: asyncio.Event,
    ) -> None:
        self.parts = parts
        self.leadership = parts.leadership
        self._spawn = spawn
        self._tasks = tasks
        self._campaign_task: asyncio.Task[None] | None = None
        self.elector: LeaderElector | None = None
        self.stepped_down = stepped_down  # set once this coordinator lost its lease

    def run_loops(self) -> None:
        for loop in self.parts.loops():
            self._spawn(loop)

    async def begin(self, s: Settings, chosen: str, identity: str) -> None:
        """A first round before serving: a lone coordinator (or one whose lease is free)
        adopts before any call, as without election; others serve as standbys."""
        self.leadership.identity = identity
        lock = await self.parts.lease_lock(s, chosen)
        self.elector = LeaderElector(lock, self.leadership, s.leases.timing)
        won = await self._first_round(s.leases.timing.renew_deadline)
        if won and not await self._take_office(self.elector.epoch or 0):
            raise StartupError("elected, but could not take office; see the log")
        self._campaign_task = asyncio.get_running_loop().create_task(self._campaign(won))
        if not won:
            log.info("standing by for the %s as %s", lock.description, identity)

    async def _first_round(self, deadline: float) -> bool:
        assert self.elector is not None
        try:
            async with asyncio.timeout(deadline):
                return await self.elector.try_acquire_or_renew()
        except Exception as exc:
            log.warning("first leader election round failed: %s", exc)
            return False

    async def _campaign(self, won: bool) -> None:
        """Stand by until elected, take office, lead; on losing the lease stop acting at once."""
        assert self.elector is not None
        try:
            await self.elector.run(self._elected, won=won)
        except Exception:
            log.exception("leader election failed")
        finally:  # lost, failed, or cancelled because taking office failed
            self.leadership.step_down()
            for task in self._tasks:
                task.cancel()
            self.stepped_down.set()

    def _elected(self, epoch: int) -> None:
        self._spawn(self._take_office_quietly(epoch))

    async def _take_office_quietly(self, epoch: int) -> None:
        await self._take_office(epoch)

    async def _take_office(self, epoch: int) -> bool:
        """Raise the fence to `epoch`, adopt what runs, then schedule and reconcile."""
        try:
            await self.parts.take_office(epoch)
        except Exception as exc:  # e.g. the backend cannot list what runs: let another lead
            log.error("cannot take office under epoch %d (%s): stepping down", epoch, exc)
            if self._campaign_task is not None:
                self._campaign_task.cancel()
            return False
        self.run_loops()
        self.leadership.serve()
        log.info("leading under epoch %d: scheduling and reconciling", epoch)
        return True

    async def end(self) -> None:
        """After the loops stopped: leave the election, so a standby may take over now."""
        if self._campaign_task is None:
            return
        self._campaign_task.cancel()
        await asyncio.gather(self._campaign_task, return_exceptions=True)
        assert self.elector is not None
        await self.elector.release()
