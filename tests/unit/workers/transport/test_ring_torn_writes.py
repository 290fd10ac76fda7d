"""A writer that dies mid-write never lets a torn message be read; a frame that does not
describe a whole slot, and a ring that is not a sealed memfd of the agreed size, are refused.

The writer is a real process (ring_writer.py) on a real link, SIGKILLed at a random moment
while it copies megabytes into its ring: every message the reader gets is exactly one the
writer made (each carries its index, length and SHA-256), and after the kill the reader's
next frame raises LinkClosed. A ring that fills up (equal messages wrapping to end exactly at
the oldest slot still held) never overwrites a slot before its release. The random moments
come from APPLIANCE_TORN_WRITE_SEED (printed, so that a failure can be replayed), else from
the clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import random
import signal
import socket
import struct
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from appliance.workers.transport import local_link
from appliance.workers.transport.local_link import Link, LinkClosed
from appliance.workers.transport.shm_ring import (
    DATA_START,
    RING_BYTES,
    ReceiveRing,
    RingError,
    SendRing,
    slot_bytes,
)

ROOT = Path(__file__).resolve().parents[4]
WRITER = Path(__file__).with_name("ring_writer.py")
TOKEN = "torn-write-test-token"
PREFIX = struct.Struct("<QQ32s")  # as ring_writer.PREFIX
SEED = int(os.environ.get("APPLIANCE_TORN_WRITE_SEED") or time.time_ns() % 1_000_000)


@contextlib.asynccontextmanager
async def writer(tmp_path: Path, mode: str, seed: int) -> AsyncIterator[tuple[Link, int]]:
    """A writer process connected to us; yields our end of its link and its pid."""
    loop = asyncio.get_running_loop()
    path = str(tmp_path / "reader.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    listener.setblocking(False)
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(WRITER), path, TOKEN, mode, str(seed),
        env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
    )  # fmt: skip
    try:
        async with asyncio.timeout(30):
            connection, _ = await loop.sock_accept(listener)
            connection.setblocking(False)
            link = await local_link.accept(connection, TOKEN)
        assert link is not None
        try:
            yield link, process.pid
        finally:
            link.close()
    finally:
        listener.close()
        if process.returncode is None:
            process.kill()
        await process.wait()


def check_whole(data: bytes, index: int) -> None:
    """`data` is exactly the writer's message `index`."""
    got_index, length, digest = PREFIX.unpack_from(data)
    assert got_index == index, f"message {got_index} where {index} was due"
    body = memoryview(data)[PREFIX.size :]
    assert len(body) == length, f"message {index}: {len(body)} bytes, {length} written"
    assert hashlib.sha256(body).digest() == digest, f"message {index} is torn"


@pytest.mark.parametrize("round_", range(3))
async def test_a_writer_killed_mid_write_never_gives_a_torn_message(
    tmp_path: Path, round_: int
) -> None:
    seed = SEED + round_
    rng = random.Random(seed)
    print(f"APPLIANCE_TORN_WRITE_SEED={SEED} (round {round_})")
    read = 0
    async with writer(tmp_path, "stream", seed) as (link, pid):
        kill_after = rng.randrange(1, 12)
        kill_delay = rng.uniform(0, 0.01)  # into the writer's next copies
        async with asyncio.timeout(60):
            while True:
                try:
                    frame = await link.next_frame()
                except LinkClosed:
                    break  # the writer is dead: what it announced was all whole
                # Never raises: a frame only ever announces a whole slot.
                check_whole(link.read_message(frame), read)
                read += 1
                if read == kill_after:
                    loop = asyncio.get_running_loop()
                    loop.call_later(kill_delay, os.kill, pid, signal.SIGKILL)
        with pytest.raises(LinkClosed):  # and stays closed
            await link.next_frame()
    assert read >= kill_after, f"seed {seed}"


async def test_a_slot_announced_before_its_header_is_written_is_refused(tmp_path: Path) -> None:
    async with writer(tmp_path, "early", SEED) as (link, _):
        for index in range(3):
            check_whole(link.read_message(await link.next_frame()), index)
        frame = await link.next_frame()
        with pytest.raises(LinkClosed, match="message 4 is not whole in its slot"):
            link.read_message(frame)


@pytest.fixture
async def rings() -> AsyncIterator[tuple[SendRing, ReceiveRing]]:
    sender = SendRing(64 << 10)
    receiver = ReceiveRing(os.dup(sender.fd), 64 << 10)
    yield sender, receiver
    receiver.close()
    sender.close()


async def test_frames_that_do_not_describe_a_whole_slot_are_refused(
    rings: tuple[SendRing, ReceiveRing],
) -> None:
    sender, receiver = rings
    seq, offset, length = await sender.write([b"first message"], lambda: 0)
    for announced, refusal in [
        ((seq + 1, offset, length), "message 2 announced where 1 was due"),  # out of order
        ((0, offset, length), "message 0 announced where 1 was due"),
        ((seq, 8, length), "message 1 lies outside the ring"),  # its header before the ring
        ((seq, (64 << 10) - 20, length), "message 1 lies outside the ring"),  # past the end
        ((seq, offset, 1 << 62), "message 1 lies outside the ring"),  # a huge length
        ((seq, offset, length - 1), "message 1 is not whole in its slot"),  # not its length
        ((seq, offset + 64, length), "message 1 is not whole in its slot"),  # another place
    ]:
        with pytest.raises(RingError, match=refusal):
            receiver.read(*announced)
    assert receiver.read(seq, offset, length) == b"first message"  # refusals changed nothing
    first = seq

    seq, offset, length = await sender.write([b"second"], lambda: first)  # the first released
    struct.pack_into("<Q", sender._map, offset + length, seq + 7)  # its trailer: not its own
    with pytest.raises(RingError, match="message 2 changed while it was read"):
        receiver.read(seq, offset, length)
    struct.pack_into("<QQ", sender._map, offset - 16, seq - 1, length)  # an older header
    with pytest.raises(RingError, match="message 2 is not whole in its slot"):
        receiver.read(seq, offset, length)


def memfd(size: int, seals: int) -> int:
    fd = os.memfd_create("not-a-ring", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if seals:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


@pytest.mark.parametrize(
    ("make", "refusal"),
    [
        (lambda path: memfd(RING_BYTES, 0), "not sealed against resizing"),  # shrinkable
        (lambda path: memfd(RING_BYTES, fcntl.F_SEAL_GROW), "not sealed against resizing"),
        (
            lambda path: memfd(RING_BYTES // 2, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW),
            "not a shared-memory file of the agreed size",
        ),
        (lambda path: _regular_file(path), "the peer's ring is not a shared-memory file$"),
        (lambda path: _pipe(), "the peer's ring is not a shared-memory file$"),
    ],
    ids=["shrinkable memfd", "growth-sealed only", "wrong size", "regular file", "pipe"],
)
def test_a_ring_that_is_not_a_sealed_memfd_of_the_agreed_size_is_refused(
    tmp_path: Path, make: object, refusal: str
) -> None:
    fd = make(tmp_path / "ring")  # type: ignore[operator]
    with pytest.raises(RingError, match=refusal):
        ReceiveRing(fd)
    with pytest.raises(OSError):  # taken and closed, whatever it was
        os.fstat(fd)


def _regular_file(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.ftruncate(fd, RING_BYTES)
    return fd


def _pipe() -> int:
    reading, writing = os.pipe()
    os.close(writing)
    return reading


async def test_a_full_ring_never_overwrites_a_slot_the_reader_holds() -> None:
    """Equal messages (a data set's batches) wrap to end exactly where the oldest held slot
    starts: the ring is full then, and the next write waits for a release."""
    slot = slot_bytes(1000)
    size = DATA_START + 3 * slot
    sender = SendRing(size)
    receiver = ReceiveRing(os.dup(sender.fd), size)
    released = [0]  # the last message the reader released, as the writer reads it

    def release(seq: int) -> None:
        released[0] = seq
        sender.wake()

    def write(data: bytes) -> Any:
        return sender.write([data], lambda: released[0])

    try:
        frames = [await write(bytes([n]) * 1000) for n in range(3)]
        assert receiver.read(*frames[0]) == bytes([0]) * 1000
        release(frames[0][0])
        frames.append(await write(bytes([3]) * 1000))  # wraps into the first slot
        fifth = asyncio.create_task(write(bytes([4]) * 1000))
        await asyncio.sleep(0)  # let it run as far as it can: it must wait for room
        assert not fifth.done()
        for n in (1, 2, 3):
            assert receiver.read(*frames[n]) == bytes([n]) * 1000
        release(frames[1][0])
        assert receiver.read(*await fifth) == bytes([4]) * 1000
    finally:
        receiver.close()
        sender.close()


async def test_messages_of_any_sizes_come_out_as_they_went_in() -> None:
    """A writer and a reader that releases late and in bursts, messages of random sizes (many
    equal), many times round a small ring: every message read is the one written."""
    rng = random.Random(SEED)
    print(f"APPLIANCE_TORN_WRITE_SEED={SEED}")
    size = 16 << 10
    sender = SendRing(size)
    receiver = ReceiveRing(os.dup(sender.fd), size)
    sizes = [rng.choice([0, 1, 100, 1000, 1000, 1000, 4000, (size // 2) - slot_bytes(0)])
             for _ in range(2000)]  # fmt: skip
    announced: asyncio.Queue[tuple[int, int, int]] = asyncio.Queue()
    released = [0]

    async def write() -> None:
        for index, length in enumerate(sizes):
            data = bytes([index % 251]) * length
            await announced.put(await sender.write([data], lambda: released[0]))

    writing = asyncio.create_task(write())
    try:
        unreleased: list[int] = []
        for index, length in enumerate(sizes):
            frame = await asyncio.wait_for(announced.get(), 10)
            assert receiver.read(*frame) == bytes([index % 251]) * length, f"seed {SEED}"
            unreleased.append(frame[0])
            if rng.random() < 0.3 or announced.empty():
                released[0] = unreleased[-1]
                sender.wake()
                unreleased.clear()
        await writing
    finally:
        writing.cancel()
        receiver.close()
        sender.close()
