"""A real coordinator on ephemeral ports, in a thread of the test process, plus process checks."""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import psutil

from appliance.config import Settings
from appliance.server.app import Coordinator
from appliance.server.auth import create_token
from tests import timing

# The users of the authentication tests: (groups, admin).
USERS = {"alice": (["nlp"], False), "carol": (["nlp"], False), "bob": (["cv"], False),
         "root": ([], True)}  # fmt: skip


class RunningCoordinator:
    """Start/stop a Coordinator on its own event loop thread; the test talks to it over gRPC."""

    def __init__(self, data_dir: Path, **overrides: object) -> None:
        values: dict[str, object] = {
            "data_dir": data_dir,
            "grpc_port": 0,
            "http_port": 0,
            "cancel_grace_seconds": 2.0,
        }
        self.settings = Settings(**{**values, **overrides})  # type: ignore[arg-type]
        self.stopped = False
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.coordinator = Coordinator(self.settings)

    def start(self) -> RunningCoordinator:
        self.thread.start()
        self.call(self.coordinator.start())
        return self

    def call(self, coro: object, timeout: float = 30) -> object:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]
        return future.result(timeout)

    @property
    def address(self) -> str:
        return self.coordinator.address

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        try:
            self.call(self.coordinator.stop(grace=1.0))
        except TimeoutError:
            dump_stacks(self.loop)
            raise
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


def dump_stacks(loop: asyncio.AbstractEventLoop) -> None:
    """Every thread's stack and every task of `loop`, on stderr: what a stop that hung waits on."""
    faulthandler.dump_traceback(sys.stderr, all_threads=True)
    with contextlib.suppress(RuntimeError):  # the loop's tasks changed meanwhile
        for task in list(asyncio.all_tasks(loop)):
            task.print_stack(file=sys.stderr)


@contextlib.contextmanager
def serving(data_dir: Path, **overrides: object) -> Iterator[RunningCoordinator]:
    """A coordinator on free ports for one test; at the end every replica must be gone (each
    test ends with its jobs terminal, so the coordinator must have reaped them)."""
    running = RunningCoordinator(data_dir, **overrides).start()
    try:
        yield running
    finally:
        address = running.address
        try:
            wait_until(lambda: not worker_processes(coordinator=address), 15, "replicas to exit")
        finally:
            leftover = [p.pid for p in worker_processes(coordinator=address)]
            kill_workers(address)
            running.stop()
        assert not leftover, f"replica processes left behind: {leftover}"


def worker_processes(
    job_id: str | None = None, coordinator: str | None = None
) -> list[psutil.Process]:
    """Live `python -m appliance.workers` processes, optionally of one job or coordinator."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if "appliance.workers" not in cmdline or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if job_id is not None and job_id not in cmdline:
            continue
        if coordinator is not None and coordinator not in cmdline:
            continue
        found.append(proc)
    return found


def kill_workers(coordinator: str) -> None:
    for proc in worker_processes(coordinator=coordinator):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    psutil.wait_procs(worker_processes(coordinator=coordinator), timeout=10)


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    """Poll a real condition until it holds (the condition is the synchronisation), for
    `timeout` seconds stretched by APPLIANCE_TEST_SLOWDOWN (tests/timing.py)."""
    timeout = timing.scaled(timeout)
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(0.02)


def user_tokens(tokens_file: Path, names: Iterable[str] = USERS) -> dict[str, str]:
    """A token in `tokens_file` (what `auth_tokens_file` names) for each of `names` (USERS):
    alice and carol in group nlp, bob in cv, root an admin."""
    return {
        name: create_token(tokens_file, name, USERS[name][0], admin=USERS[name][1])
        for name in names
    }


__all__ = [
    "RunningCoordinator", "kill_workers", "user_tokens", "wait_until", "worker_processes",
]  # fmt: skip
