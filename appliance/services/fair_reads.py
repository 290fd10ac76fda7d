"""Store reads served in turn by user, so one user's reads cannot make everyone else's wait (as
the Kubernetes API server's Priority and Fairness queues requests per flow, and shuffles
them fairly): the doors say whose a call is (`reading_as`, after the per-user limits let it
in), and a read that finds every reader thread busy waits in its user's own queue; a thread
that frees takes the next read of the next user in turn. A user with 32 reads waiting and
another with one: the other's is next, not 33rd.

A read that no door named (the scheduler, the reconciler, a replica's call) is the flow "".
Without contention (a thread free, nothing waiting) a read goes straight to its thread.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from concurrent.futures import Executor
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")

_FLOW: ContextVar[str] = ContextVar("read_flow", default="")


def reading_as(user: str) -> None:
    """Whose the current call's reads are (a door calls it once per call; each call runs in
    its own task, so in its own context)."""
    _FLOW.set(user)


class FairReads:
    """Runs blocking read calls on `executor` (of `threads` threads), at most `threads` at a
    time, in turn by flow when they must wait."""

    def __init__(self, executor: Executor, threads: int) -> None:
        self._executor = executor
        self._threads = threads
        self._running = 0
        # flow -> its waiting reads' turns, in arrival order; flows in the order they are served
        self._waiting: collections.OrderedDict[str, collections.deque[asyncio.Future[None]]] = (
            collections.OrderedDict()
        )

    async def run(self, call: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        if self._running < self._threads and not self._waiting:
            self._running += 1
        else:
            turn: asyncio.Future[None] = loop.create_future()
            self._waiting.setdefault(_FLOW.get(), collections.deque()).append(turn)
            try:
                await turn  # given a thread by the read before it (`_next`)
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled():
                    self._next()  # given one just as it was cancelled: pass it on
                raise
        try:
            return await loop.run_in_executor(self._executor, call)
        finally:
            self._next()

    def _next(self) -> None:
        """A thread is free: give it to the first waiting read of the next flow in turn."""
        while self._waiting:
            flow, turns = next(iter(self._waiting.items()))
            turn = turns.popleft()
            if turns:
                self._waiting.move_to_end(flow)  # its next read after the other flows' next
            else:
                del self._waiting[flow]
            if not turn.done():  # (one cancelled while waiting is skipped)
                turn.set_result(None)
                return
        self._running -= 1

    @property
    def waiting(self) -> int:
        return sum(len(turns) for turns in self._waiting.values())
