"""One connection between two co-located replicas: a Unix socket for frames, a shared-memory
ring each way for the messages (shm_ring.py).

The socket is abstract (no file; channels.local_address names it after the job's token), so
anyone on the host can see its name in /proc/net/unix and try it. Each end first checks the
other's uid (SO_PEERCRED): the server turns another user away before reading a byte, and the
client never tells its token to a socket another user serves. Then the client proves it knows
the job's data-plane token (the credential every gRPC call of the job carries,
job_credential.py), and only then do the two exchange their rings' descriptors (SCM_RIGHTS).
A stranger gets one refusal line and the connection closes: no descriptor, no parsing.

After that the socket carries only small frames: a call's method, a message's sequence
number, offset and length in the sender's ring, the end of a request stream, a status, and a
wake-up for a writer waiting for room. Every frame is bounded before it is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import os
import socket
import struct
from collections.abc import Callable
from typing import Any

from appliance.workers.transport.shm_ring import ReceiveRing, RingError, SendRing
from appliance.workers.transport.wire import Buffer

# Frame kinds.
CALL, MESSAGE, END, STATUS, RELEASE = 1, 2, 3, 4, 5
_FRAME = struct.Struct("<BQQQI")  # kind, three numbers, payload length
_MAX_PAYLOAD = 4096  # a method name or a status's details
_GREETING = b"appliance-dataplane-1\n"
_MAX_TOKEN = 512
_ACCEPTED = b"+"
REFUSAL = b"-data-plane calls need the job's credential\n"
_HANDSHAKE_SECONDS = 5.0


def message_parts(serialize: Callable[[Any], bytes], message: Any) -> list[Buffer]:
    """`message` serialized, as pieces where the serializer can give them (no joining copy)."""
    parts = getattr(serialize, "parts", None)
    return list(parts(message)) if parts is not None else [serialize(message)]


class LinkClosed(Exception):
    """The peer closed the connection (or died), or broke the protocol."""


@dataclasses.dataclass(frozen=True)
class Frame:
    kind: int
    a: int = 0
    b: int = 0
    c: int = 0
    payload: bytes = b""


class Link:
    """A connected, authenticated pair of rings and the socket's frames."""

    def __init__(self, outbound: SendRing, inbound: ReceiveRing) -> None:
        self._outbound = outbound
        self._inbound = inbound
        self._frames: asyncio.Queue[Frame | LinkClosed] = asyncio.Queue()
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self.closed = False
        self._why = ""

    async def send_message(self, parts: list[Buffer]) -> None:
        """One message: its bytes into the ring, then the frame that says where they are."""
        try:
            seq, offset, length = await self._outbound.write(parts, self._inbound.peer_released)
        except RingError as err:
            raise LinkClosed(str(err)) from None
        self.send_frame(MESSAGE, seq, offset, length)

    def send_frame(
        self, kind: int, a: int = 0, b: int = 0, c: int = 0, payload: bytes = b""
    ) -> None:
        transport = self._transport
        if self.closed or transport is None or transport.is_closing():
            raise LinkClosed(self._why or "the peer closed the connection")
        transport.write(_FRAME.pack(kind, a, b, c, len(payload)) + payload)

    async def next_frame(self) -> Frame:
        """The next frame other than a release; LinkClosed once the peer is gone."""
        frame = await self._frames.get()
        if self.closed:  # closed here: frames still queued are not read
            frame = LinkClosed(self._why)
        if isinstance(frame, LinkClosed):
            self._frames.put_nowait(frame)  # whoever asks next hears it too
            raise frame
        return frame

    def read_message(self, frame: Frame) -> bytes:
        """The bytes a MESSAGE frame announces, copied out of the peer's ring and released
        (a frame wakes the peer only if it waits for room)."""
        if self.closed:
            raise LinkClosed(self._why)
        try:
            data = self._inbound.read(frame.a, frame.b, frame.c)
        except RingError as err:
            raise LinkClosed(str(err)) from None
        self._outbound.consumed(frame.a)
        if self._inbound.peer_waits():
            self.send_frame(RELEASE)
        return data

    def close(self, why: str = "the connection is closed") -> None:
        """Close the socket and unmap the rings; whoever waits for a frame gets LinkClosed."""
        if self.closed:
            return
        self.closed = True
        self._why = why
        if self._transport is not None:
            self._transport.close()
        self._frames.put_nowait(LinkClosed(why))
        self._outbound.close()
        self._inbound.close()

    async def start(self, sock: socket.socket) -> None:
        """Take frames from the connected `sock` from now on."""
        loop = asyncio.get_running_loop()
        await loop.create_unix_connection(lambda: _Frames(self), sock=sock)

    def _frames_arrived(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        position = 0
        while len(buffer) - position >= _FRAME.size:
            kind, a, b, c, size = _FRAME.unpack_from(buffer, position)
            if size > _MAX_PAYLOAD:
                self._lost(f"a frame of {size} bytes is over {_MAX_PAYLOAD}")
                return
            end = position + _FRAME.size + size
            if len(buffer) < end:
                break
            if kind == RELEASE:
                self._outbound.wake()
            else:
                payload = bytes(buffer[position + _FRAME.size : end]) if size else b""
                self._frames.put_nowait(Frame(kind, a, b, c, payload))
            position = end
        del buffer[:position]

    def _lost(self, why: str) -> None:
        self._outbound.abandon()  # a writer waiting for room fails, not hangs
        self._frames.put_nowait(LinkClosed(why))
        if self._transport is not None:
            self._transport.close()


class _Frames(asyncio.Protocol):
    """The socket's side of a link: frames parsed as bytes arrive, straight to the link."""

    def __init__(self, link: Link) -> None:
        self._link = link

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._link._transport = transport

    def data_received(self, data: bytes) -> None:
        self._link._frames_arrived(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._link._lost("the peer closed the connection" if exc is None else str(exc))


async def connect(path: str, token: str) -> Link:
    """Open a link to the replica serving at `path`; LinkClosed if it refuses or is not there."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    outbound: SendRing | None = None
    inbound: ReceiveRing | None = None
    try:
        sock.setblocking(False)
        async with asyncio.timeout(_HANDSHAKE_SECONDS):
            await loop.sock_connect(sock, path)
            # The name may be another user's now (its replica gone, the name seen in
            # /proc/net/unix and bound): never tell the token to anyone but our own user.
            if _peer_uid(sock) != os.getuid():
                raise LinkClosed("the socket is served by another user")
            encoded = token.encode()
            await loop.sock_sendall(sock, _GREETING + struct.pack("<H", len(encoded)) + encoded)
            answer, fds = await _receive_fds(sock, len(REFUSAL))
            if answer != _ACCEPTED or len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                raise LinkClosed(answer.decode(errors="replace").strip("-\n") or "refused")
            inbound = ReceiveRing(fds[0])
            outbound = SendRing()
            await _send_fd(sock, outbound.fd)
    except (OSError, TimeoutError, RingError, LinkClosed) as err:
        sock.close()
        for ring in (outbound, inbound):
            if ring is not None:
                ring.close()
        raise LinkClosed(f"cannot connect to {path}: {err}") from None
    link = Link(outbound, inbound)
    await link.start(sock)
    return link


async def accept(sock: socket.socket, token: str) -> Link | None:
    """Authenticate a connection made to a replica's socket and give it a link; None (the
    connection closed) for a stranger."""
    loop = asyncio.get_running_loop()
    outbound: SendRing | None = None
    try:
        async with asyncio.timeout(_HANDSHAKE_SECONDS):
            # Another user is turned away before anything is read: it cannot hold a
            # connection (of the few a server takes) through the handshake's time.
            if _peer_uid(sock) != os.getuid():
                raise LinkClosed("another user")
            head = await _receive_exactly(loop, sock, len(_GREETING) + 2)
            size = struct.unpack("<H", head[-2:])[0]
            if head[:-2] != _GREETING or size > _MAX_TOKEN:
                raise LinkClosed("a stranger")
            presented = await _receive_exactly(loop, sock, size)
            if not hmac.compare_digest(presented, token.encode()):
                raise LinkClosed("a wrong credential")
            outbound = SendRing()
            await _send_fd(sock, outbound.fd, _ACCEPTED)
            _, fds = await _receive_fds(sock, 1)  # only its byte: frames may follow
            if len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                raise LinkClosed("no ring from the client")
            inbound = ReceiveRing(fds[0])
    except (OSError, TimeoutError, RingError, LinkClosed, asyncio.IncompleteReadError):
        with contextlib.suppress(OSError):
            sock.send(REFUSAL)
        sock.close()
        if outbound is not None:
            outbound.close()
        return None
    link = Link(outbound, inbound)
    await link.start(sock)
    return link


def _peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end (for a client: the one that listens)."""
    uid: int = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
    return uid


async def _receive_exactly(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, size: int
) -> bytes:
    data = b""
    while len(data) < size:
        more = await loop.sock_recv(sock, size - len(data))
        if not more:
            raise asyncio.IncompleteReadError(data, size)
        data += more
    return data


async def _send_fd(sock: socket.socket, fd: int, message: bytes = b"r") -> None:
    await _writable(sock)
    socket.send_fds(sock, [message], [fd])


async def _receive_fds(sock: socket.socket, size: int) -> tuple[bytes, list[int]]:
    """Up to `size` bytes and the descriptors they carry (at most one is expected)."""
    while True:
        await _readable(sock)
        try:
            message, fds, flags, _ = socket.recv_fds(sock, size, 1)
        except BlockingIOError:
            continue
        if flags & socket.MSG_CTRUNC:
            for fd in fds:
                os.close(fd)
            raise LinkClosed("too many descriptors")
        return message, fds


async def _readable(sock: socket.socket) -> None:
    await _ready(sock, reading=True)


async def _writable(sock: socket.socket) -> None:
    await _ready(sock, reading=False)


async def _ready(sock: socket.socket, reading: bool) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    add, remove = (
        (loop.add_reader, loop.remove_reader) if reading else (loop.add_writer, loop.remove_writer)
    )
    add(sock.fileno(), wake)
    try:
        await ready
    finally:
        remove(sock.fileno())
