"""Store reads served in turn by user, so one user's reads cannot make everyone else's wait (as
the Kubernetes API server's Priority and Fairness queues requests per flow, and shuffles
them fairly): the doors say whose a call is (`reading_as`, after the per-user limits let it
in), and a read that finds every reader thread busy waits in its user's own queue; a thread
that frees takes the next read of the next user in turn. A user with 32 reads waiting and
another with one: the other's is next, not 33rd.

A read that no door named (the scheduler, the reconciler) is the coordinator's own, flow "",
which takes its turn as a user's does; a read that serves everyone is made `as_system()`.
Without contention (a thread free, nothing waiting) a read goes straight to its thread.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")

SYSTEM = ""  # the flow of reads no door named: the coordinator's own
_FLOW: ContextVar[str] = ContextVar("read_flow", default=SYSTEM)


def reading_as(user: str) -> None:
    """Whose the current call's reads are (a door calls it once per call; each call runs in
    its own task, so in its own context)."""
    _FLOW.set(user)


@contextlib.contextmanager
def as_system() -> Iterator[None]:
    """The reads made inside are the coordinator's own, not the calling user's: a read that
    serves everyone (the queue's positions, the start estimates, a listing chunk others wait
    on) must not wait in the line of the user whose call happened to start it."""
    token = _FLOW.set(SYSTEM)
    try:
        yield
    finally:
        _FLOW.reset(token)


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
        running = self._executor.submit(call)
        # The thread is given back when the call ends, not when its caller stops waiting: a
        # read cancelled while it runs (a deadline, a client gone) still holds the thread.
        running.add_done_callback(lambda _: loop.call_soon_threadsafe(self._next))
        return await asyncio.wrap_future(running)

    def _next(self) -> None:
        """A thread is free: give it to the first waiting read of the next flow in turn (the
        coordinator's own reads are one flow among the users': served first, they made the
        others' p99 3x worse in bench.hostile_user, the reconciler's and the watchers' reads
        being many)."""
        while self._waiting:
            flow = next(iter(self._waiting))
            turns = self._waiting[flow]
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
