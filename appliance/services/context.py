"""What every use case needs: the store (run off the event loop), the bus, settings, a clock."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from sqlalchemy.exc import OperationalError

from appliance.config import Settings
from appliance.domain.errors import Unavailable
from appliance.domain.phases import TERMINAL, Phase
from appliance.services.bus import JobBus
from appliance.store.jobs import JobStore, PhaseChange

P = ParamSpec("P")
T = TypeVar("T")


@dataclasses.dataclass
class Context:
    settings: Settings
    store: JobStore
    bus: JobBus
    executor: ThreadPoolExecutor
    clock: Callable[[], float] = time.time

    async def db(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a blocking store call on the store's threads, never on the event loop.

        A database that cannot be reached (or is locked past its timeout) is Unavailable: the
        caller may retry, and the user sees that rather than an internal error.
        """
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(
                self.executor, functools.partial(fn, *args, **kwargs)
            )
        except OperationalError as exc:
            first_line = str(exc.orig or exc).strip().splitlines()[0][:200]
            raise Unavailable(f"the job store is unavailable ({first_line}); retry") from exc

    async def set_phase(
        self, job_id: str, target: Phase, reason: str, expected: Phase | None = None
    ) -> PhaseChange:
        """JobStore.set_phase, then tell watchers and wake the loops that care."""
        change = await self.db(
            self.store.set_phase, job_id, target, reason, self.clock(), expected
        )
        self.announce(change)
        return change

    def announce(self, change: PhaseChange) -> None:
        if change.event is None:
            return
        self.bus.publish(change.event)
        if change.event.to_phase in TERMINAL:
            self.bus.wake_scheduler()  # resources came back
        self.bus.wake_reconciler()
