"""A one-way ring of shared memory between two co-located replicas: one writes, one reads.

The writer creates the ring as an anonymous memfd (never a name under /dev/shm: nothing to
guess, nothing to unlink, and the kernel frees it once neither process holds it, however
either ends), sealed so that its size can never change and no one can map it writable after
the writer, and hands its descriptor to the reader over the job's Unix socket
(transport/local_link.py). The reader maps it read-only.

A message occupies one slot: a header (sequence number, length), the message's bytes, and
the sequence number again. The writer fills the slot and only then tells the reader where it
is (a frame on the socket with the sequence number, offset and length), so a writer that dies
mid-write never announces a torn slot; the reader still checks that both sequence numbers
and the length match what the frame says before and after it copies the bytes out, so a slot
that was overwritten or never finished is refused, never read. The reader copies a message
out and releases it at once, by writing the message's sequence number into the control area
of its own ring (which the writer maps): no frame, no wakeup of the writer, unless the writer
said it waits for room. The writer reuses a slot only after its release (in order: the one
reader consumes in order), so the ring is also the flow control of the stream.
"""

from __future__ import annotations

import asyncio
import collections
import fcntl
import mmap
import os
import stat
import struct
from collections.abc import Callable

from appliance.workers.waits import wait_at_most

# Room for two of the largest messages a data-plane call may carry (channels._MESSAGE_LIMIT).
RING_BYTES = 8 << 20
# The first cache line is the owner's control area, which the peer reads: how far the owner
# has consumed the peer's own ring (so the peer reuses those slots without a frame for each),
# and whether the owner waits for room in this ring (then the peer sends a frame to wake it).
_CONTROL = struct.Struct("<QQ")
DATA_START = 64
_HEADER = struct.Struct("<QQ")  # sequence number, length
_TRAILER = struct.Struct("<Q")
_ALIGN = 64  # every slot starts on a cache line; its data then start 16 bytes further
# Shrinking, growing, further seals, and (after the writer's own mapping) any new writable
# mapping or write(): the reader can neither break the writer (SIGBUS on a shrunk file) nor
# write into its ring. F_SEAL_FUTURE_WRITE (Linux 5.1) is not in Python's fcntl module.
_F_SEAL_FUTURE_WRITE = 0x0010
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | _F_SEAL_FUTURE_WRITE | fcntl.F_SEAL_SEAL
_REQUIRED_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW


class RingError(Exception):
    """A slot that is not what its frame says, or a ring that cannot be used."""


def slot_bytes(length: int) -> int:
    """The room a message of `length` bytes takes in the ring."""
    size = _HEADER.size + length + _TRAILER.size
    return -(-size // _ALIGN) * _ALIGN


MAX_MESSAGE = (RING_BYTES - DATA_START) // 2 - slot_bytes(0)
# A writer waiting for room looks again this often, in case its wake-up frame and the
# reader's release crossed (stores and loads to shared memory are not fenced from Python).
_RECHECK_SECONDS = 0.002


class SendRing:
    """The writer's side: where the next message goes, and what the reader still holds."""

    def __init__(self, size: int = RING_BYTES) -> None:
        self.size = size
        self.fd = os.memfd_create("appliance-ring", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self.fd, size)
            self._map = mmap.mmap(self.fd, size, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, _SEALS)
        except OSError:
            os.close(self.fd)
            raise
        self._view = memoryview(self._map)
        self._head = DATA_START  # where the next slot starts
        # Slots the reader holds, oldest first: (sequence number, start, end).
        self._held: collections.deque[tuple[int, int, int]] = collections.deque()
        self._next_seq = 1
        self._consumed = 0
        self._waiting = False
        self._released = asyncio.Event()
        self._closed = False

    async def write(
        self, parts: list[bytes | memoryview], released: Callable[[], int]
    ) -> tuple[int, int, int]:
        """Copy `parts` (one message) into a free slot, waiting for room; returns the slot's
        (sequence number, offset of its data, length) for the frame that announces it.
        `released()` is the last sequence number the reader has released."""
        if self._closed:
            raise RingError("the peer is gone")
        length = sum(len(part) for part in parts)
        if length > MAX_MESSAGE:
            raise RingError(f"a message of {length} bytes is over the {MAX_MESSAGE} a ring takes")
        need = slot_bytes(length)
        self._free(released())
        while (start := self._room(need)) is None:
            if self._closed:
                raise RingError("the ring was closed")
            self._released.clear()
            self._publish(waiting=True)  # wake me when you release
            self._free(released())
            if self._room(need) is None:
                await wait_at_most(self._released, _RECHECK_SECONDS)
                if self._closed:
                    raise RingError("the ring was closed")
                self._free(released())
            self._publish(waiting=False)
        seq = self._next_seq
        self._next_seq += 1
        data = start + _HEADER.size
        position = data
        for part in parts:
            self._view[position : position + len(part)] = part
            position += len(part)
        _TRAILER.pack_into(self._map, position, seq)
        _HEADER.pack_into(self._map, start, seq, length)  # last: the slot is whole now
        self._head = start + need
        self._held.append((seq, start, start + need))
        return seq, data, length

    def wake(self) -> None:
        """The reader released slots while this writer waited for room."""
        self._released.set()

    def consumed(self, seq: int) -> None:
        """Tell the peer (through this ring's control area) that its message `seq` is read."""
        self._consumed = seq
        self._publish(self._waiting)

    def _publish(self, waiting: bool) -> None:
        self._waiting = waiting
        if not self._closed:
            _CONTROL.pack_into(self._map, 0, self._consumed, int(waiting))

    def _free(self, seq: int) -> None:
        """The reader is done with every slot up to `seq`."""
        while self._held and self._held[0][0] <= seq:
            self._held.popleft()
        if not self._held:
            self._head = DATA_START

    def abandon(self) -> None:
        """The reader is gone: a writer waiting for room, or writing later, fails."""
        self._closed = True
        self._released.set()

    def close(self) -> None:
        """Abandon the ring and unmap it; the memory goes with the last holder."""
        self.abandon()
        self._view.release()
        self._map.close()
        os.close(self.fd)

    def _room(self, need: int) -> int | None:
        """Where a slot of `need` bytes can start now, if anywhere."""
        if not self._held:
            return DATA_START if DATA_START + need <= self.size else None
        tail = self._held[0][1]  # the oldest slot still held
        # Not wrapped: the held slots lie in [tail, head). Wrapped (head <= tail, equal when
        # the ring is full): they lie in [tail, end) and [start, head).
        if self._head > tail:
            if self._head + need <= self.size:
                return self._head
            # wrap: the end of the ring stays unused
            return DATA_START if DATA_START + need <= tail else None
        return self._head if self._head + need <= tail else None


class ReceiveRing:
    """The reader's read-only mapping of a peer's ring."""

    def __init__(self, fd: int, size: int = RING_BYTES) -> None:
        """Take `fd` (a descriptor the peer sent; closed here): it must be a sealed memfd of
        exactly `size` bytes, else RingError."""
        try:
            # The seals first: a size read before them could change before they are set.
            try:
                seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            except OSError:  # a file on disk, a pipe, a socket: nothing that can be sealed
                raise RingError("the peer's ring is not a shared-memory file") from None
            if seals & _REQUIRED_SEALS != _REQUIRED_SEALS:
                raise RingError("the peer's ring is not sealed against resizing")
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size != size:
                raise RingError("the peer's ring is not a shared-memory file of the agreed size")
            self._map = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        except OSError as err:
            raise RingError(f"the peer's ring cannot be mapped: {err.strerror}") from None
        finally:
            os.close(fd)
        self.size = size
        self._expected = 1

    def read(self, seq: int, offset: int, length: int) -> bytes:
        """A copy of the message the writer announced; RingError if the slot does not hold it
        (out of order, out of bounds, unfinished or overwritten)."""
        if seq != self._expected:
            raise RingError(f"message {seq} announced where {self._expected} was due")
        start = offset - _HEADER.size
        if not (
            start >= DATA_START and offset + length + _TRAILER.size <= self.size and length >= 0
        ):
            raise RingError(f"message {seq} lies outside the ring")
        if _HEADER.unpack_from(self._map, start) != (seq, length):
            raise RingError(f"message {seq} is not whole in its slot")
        data = self._map[offset : offset + length]
        trailer = _TRAILER.unpack_from(self._map, offset + length)[0]
        if trailer != seq or _HEADER.unpack_from(self._map, start) != (seq, length):
            raise RingError(f"message {seq} changed while it was read")
        self._expected += 1
        return data

    def peer_released(self) -> int:
        """The last sequence number of this side's messages the peer has read."""
        return int(_CONTROL.unpack_from(self._map, 0)[0])

    def peer_waits(self) -> bool:
        """Whether the peer waits for room in its ring (to be woken by a frame)."""
        return bool(_CONTROL.unpack_from(self._map, 0)[1])

    def close(self) -> None:
        self._map.close()
