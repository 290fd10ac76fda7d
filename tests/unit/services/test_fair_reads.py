"""Reads in turn by user when the reader threads are busy (services/fair_reads.py): a user with
many reads waiting does not make another's one read wait behind them all; a read cancelled
while it waits is skipped, and one cancelled while it runs keeps its thread until it ends; a
read made for everyone takes the coordinator's turn, not its starter's; with a thread free a
read goes straight to it. A real thread pool runs the reads."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from appliance.services.fair_reads import FairReads, as_system, reading_as


def _read(order: list[str], name: str, gate: threading.Event | None = None) -> Callable[[], str]:
    def call() -> str:
        if gate is not None:
            gate.wait(10)
        order.append(name)
        return name

    return call


async def _as(user: str, reads: FairReads, call: Callable[[], str]) -> str:
    reading_as(user)
    return await reads.run(call)


def _spawn(user: str, reads: FairReads, call: Callable[[], str]) -> asyncio.Task[str]:
    return asyncio.get_running_loop().create_task(
        _as(user, reads, call), context=contextvars.Context()
    )


async def _until_waiting(reads: FairReads, count: int) -> None:
    # The tasks only need the loop to run: a step, not a wait for time.
    while reads.waiting < count:  # noqa: ASYNC110
        await asyncio.sleep(0)


def test_one_users_many_reads_do_not_make_anothers_wait_behind_them_all() -> None:
    async def scenario() -> list[str]:
        order: list[str] = []
        gate = threading.Event()
        with ThreadPoolExecutor(1) as executor:
            reads = FairReads(executor, 1)
            busy = _spawn("mallory", reads, _read(order, "busy", gate))
            floods = [_spawn("mallory", reads, _read(order, f"m{i}")) for i in range(5)]
            await _until_waiting(reads, 5)
            alice = _spawn("alice", reads, _read(order, "alice"))
            await _until_waiting(reads, 6)
            gate.set()
            await asyncio.gather(busy, *floods, alice)
        return order

    assert asyncio.run(scenario()) == ["busy", "m0", "alice", "m1", "m2", "m3", "m4"]


def test_cancelled_reads_give_up_their_turn() -> None:
    async def scenario() -> list[str]:
        order: list[str] = []
        gate = threading.Event()
        with ThreadPoolExecutor(1) as executor:
            reads = FairReads(executor, 1)
            busy = _spawn("a", reads, _read(order, "busy", gate))
            gone = _spawn("b", reads, _read(order, "gone"))
            kept = _spawn("c", reads, _read(order, "kept"))
            await _until_waiting(reads, 2)
            gone.cancel()
            gate.set()
            assert await kept == "kept"
            await busy
            assert reads.waiting == 0
            assert await reads.run(_read(order, "straight")) == "straight"  # a thread is free
        return order

    assert asyncio.run(scenario()) == ["busy", "kept", "straight"]


def test_a_read_cancelled_while_it_runs_holds_its_thread_until_it_ends() -> None:
    async def scenario() -> list[str]:
        order: list[str] = []
        gate = threading.Event()
        with ThreadPoolExecutor(1) as executor:
            reads = FairReads(executor, 1)
            busy = _spawn("mallory", reads, _read(order, "busy", gate))
            await _until_running(executor)
            busy.cancel()  # a deadline: the caller stops waiting, the thread does not
            floods = [_spawn("mallory", reads, _read(order, f"m{i}")) for i in range(3)]
            await _until_waiting(reads, 3)  # they wait in line, not in the executor's queue
            alice = _spawn("alice", reads, _read(order, "alice"))
            await _until_waiting(reads, 4)
            gate.set()
            await asyncio.gather(*floods, alice)
        return order

    assert asyncio.run(scenario()) == ["busy", "m0", "alice", "m1", "m2"]


def test_the_coordinators_own_reads_take_their_turn_whoever_started_them() -> None:
    async def scenario() -> list[str]:
        order: list[str] = []
        gate = threading.Event()
        with ThreadPoolExecutor(1) as executor:
            reads = FairReads(executor, 1)
            busy = _spawn("mallory", reads, _read(order, "busy", gate))
            floods = [_spawn("mallory", reads, _read(order, f"m{i}")) for i in range(2)]
            await _until_waiting(reads, 2)
            reading_as("mallory")  # her call started it, but it is read for everyone
            with as_system():  # (the queue's positions)
                system = asyncio.ensure_future(reads.run(_read(order, "system")))
            await _until_waiting(reads, 3)
            gate.set()
            await asyncio.gather(busy, *floods, system)
        return order

    assert asyncio.run(scenario()) == ["busy", "m0", "system", "m1"]


async def _until_running(executor: ThreadPoolExecutor) -> None:
    while not executor._threads:  # noqa: ASYNC110 (the read reaches its thread)
        await asyncio.sleep(0)
