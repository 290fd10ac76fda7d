"""Work a request brings that can take seconds of CPU (parsing, planning and compiling up to
1 MiB of params) runs here, never on the event loop: a 1 MB params file took 2.9 s to
validate and 4.5 s to compile, and every other call waited behind it (GetVersion 23 s
behind two compiling clients). Small inputs stay inline (under 2 KiB, at most ~10 ms: a 60 KB
one of 30,000 layers took 1.7 s, so the bound is on bytes that can become layers, not on
parsing time).

The work runs in a small pool of processes, not threads: it is Python code holding the GIL,
and two compiling threads still held other calls up by 0.4-0.6 s (p99). Processes come from a
fork server (never a fork of this multi-threaded process), preloaded with the domain. The
number of calls waiting is bounded (beyond it: Unavailable, retry), each call has a time bound
kept by the checker itself (an interval timer interrupts the work, so a refused input stops
using a CPU at once; beyond it the input is refused as too large), and a checker process that
dies (a parser crash) costs its call an error and nothing else: the pool is rebuilt.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import multiprocessing
import signal
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import ParamSpec, TypeVar

from appliance.domain.errors import InvalidSpec, Unavailable

P = ParamSpec("P")
T = TypeVar("T")

log = logging.getLogger(__name__)
INLINE_BELOW_BYTES = 2 << 10
# If a checker does not stop by itself (stuck in C code that never returns to Python), the
# coordinator stops waiting this many times the bound later and replaces the pool.
BACKSTOP_FACTOR = 3
PRELOAD = ["appliance.domain.spec", "appliance.domain.plan", "appliance.domain.compile"]


class Offload:
    def __init__(self, workers: int = 2, max_waiting: int = 16, seconds: float = 60.0) -> None:
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None  # started on the first large input
        self.max_waiting = max_waiting
        self.seconds = seconds
        self._waiting = 0

    @property
    def waiting(self) -> int:
        """Large calls in progress or waiting for a checker."""
        return self._waiting

    async def run(
        self,
        size: int,
        field: str,
        fn: Callable[P, T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """fn(*args, **kwargs) for an input of `size` bytes in `field`: inline when small,
        else on the pool within the time bound."""
        if size < INLINE_BELOW_BYTES:
            return fn(*args, **kwargs)
        if self._waiting >= self.max_waiting:
            raise Unavailable(
                f"{self._waiting} large requests are being worked on; retry in a few seconds"
            )
        self._waiting += 1
        try:
            call = functools.partial(_within, self.seconds, fn, *args, **kwargs)
            work = asyncio.get_running_loop().run_in_executor(self._processes(), call)
            # Waiting for a free checker is not the input's fault: the bound is kept by the
            # checker; this is the backstop for one that cannot be interrupted.
            backstop = self.seconds * BACKSTOP_FACTOR * (1 + self._waiting // self.workers)
            async with asyncio.timeout(backstop):
                return await work
        except BrokenProcessPool:
            log.error("a checker process died checking %s of %d bytes; restarting", field, size)
            self.close()
            raise InvalidSpec(
                f"{field} could not be checked (its checker died)", field=field
            ) from None
        except CheckTimedOut:
            raise InvalidSpec(
                f"{field} took longer than {self.seconds:.0f} s to check; make it smaller",
                field=field,
            ) from None
        except TimeoutError:  # the checker did not stop: stop it with the others
            log.error("a checker kept working on %s past its bound; restarting them", field)
            self.close(kill=True)
            raise InvalidSpec(
                f"{field} took longer than {self.seconds:.0f} s to check; make it smaller",
                field=field,
            ) from None
        finally:
            self._waiting -= 1

    def _processes(self) -> ProcessPoolExecutor:
        if self._pool is None:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(PRELOAD)
            self._pool = ProcessPoolExecutor(self.workers, mp_context=context)
        return self._pool

    def close(self, kill: bool = False) -> None:
        if self._pool is not None:
            processes = list(getattr(self._pool, "_processes", {}).values()) if kill else []
            self._pool.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                process.kill()
            self._pool = None


class CheckTimedOut(Exception):
    """Raised inside a checker when its work passes the time bound."""


def _interrupt(signum: int, frame: object) -> None:
    raise CheckTimedOut


def _within(seconds: float, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """In a checker process: fn(*args, **kwargs), interrupted after `seconds`."""
    signal.signal(signal.SIGALRM, _interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn(*args, **kwargs)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
