"""One connection between two co-located replicas: a Unix socket for frames, a shared-memory
ring each way for the messages (shm_ring.py).

The socket lives in the job attempt's own directory (mode 0700, made by the backend and
removed with the attempt: APPLIANCE_LOCAL_SOCKETS), so only the appliance's user reaches it.
Before anything else the server checks the peer's uid (SO_PEERCRED) and that the client
knows the job's data-plane token (the credential every gRPC call of the job carries,
job_credential.py); only then do the two exchange their rings' descriptors (SCM_RIGHTS).
A stranger gets one refusal line and the connection closes: no descriptor, no parsing.

After that the socket carries only small frames: a call's method, a message's sequence
number, offset and length in the sender's ring, the end of a request stream, a status, and
releases of ring slots. Every frame is bounded before it is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import os
import socket
import struct

from appliance.workers.transport.shm_ring import ReceiveRing, RingError, SendRing

# Frame kinds.
CALL, MESSAGE, END, STATUS, RELEASE = 1, 2, 3, 4, 5
_FRAME = struct.Struct("<BQQQI")  # kind, three numbers, payload length
_MAX_PAYLOAD = 4096  # a method name or a status's details
_GREETING = b"appliance-dataplane-1\n"
_MAX_TOKEN = 512
_ACCEPTED = b"+"
REFUSAL = b"-data-plane calls need the job's credential\n"
_HANDSHAKE_SECONDS = 5.0


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

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        outbound: SendRing,
        inbound: ReceiveRing,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._outbound = outbound
        self._inbound = inbound
        self._frames: asyncio.Queue[Frame | LinkClosed] = asyncio.Queue()
        self._pump = asyncio.create_task(self._read_frames())
        self.closed = False
        self._why = ""

    async def send_message(self, parts: list[bytes | memoryview]) -> None:
        """One message: its bytes into the ring, then the frame that says where they are."""
        try:
            seq, offset, length = await self._outbound.write(parts)
        except RingError as err:
            raise LinkClosed(str(err)) from None
        self.send_frame(MESSAGE, seq, offset, length)
        await self._drain()

    def send_frame(
        self, kind: int, a: int = 0, b: int = 0, c: int = 0, payload: bytes = b""
    ) -> None:
        if self.closed:
            raise LinkClosed("the connection is closed")
        self._writer.write(_FRAME.pack(kind, a, b, c, len(payload)) + payload)

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
        """The bytes a MESSAGE frame announces, copied out of the peer's ring and released."""
        if self.closed:
            raise LinkClosed(self._why)
        try:
            data = self._inbound.read(frame.a, frame.b, frame.c)
        except RingError as err:
            raise LinkClosed(str(err)) from None
        self.send_frame(RELEASE, frame.a)
        return data

    def close(self, why: str = "the connection is closed") -> None:
        """Close the socket and unmap the rings; whoever waits for a frame gets LinkClosed."""
        if self.closed:
            return
        self.closed = True
        self._why = why
        self._pump.cancel()
        self._writer.close()
        self._frames.put_nowait(LinkClosed(why))
        self._outbound.close()
        self._inbound.close()

    async def _drain(self) -> None:
        try:
            await self._writer.drain()
        except OSError as err:
            raise LinkClosed(f"the peer is gone: {err}") from None

    async def _read_frames(self) -> None:
        try:
            while True:
                head = await self._reader.readexactly(_FRAME.size)
                kind, a, b, c, size = _FRAME.unpack(head)
                if size > _MAX_PAYLOAD:
                    raise LinkClosed(f"a frame of {size} bytes is over {_MAX_PAYLOAD}")
                payload = await self._reader.readexactly(size) if size else b""
                if kind == RELEASE:
                    self._outbound.release(a)
                else:
                    self._frames.put_nowait(Frame(kind, a, b, c, payload))
        except asyncio.IncompleteReadError:
            self._frames.put_nowait(LinkClosed("the peer closed the connection"))
        except (OSError, LinkClosed) as err:
            self._frames.put_nowait(err if isinstance(err, LinkClosed) else LinkClosed(str(err)))
        finally:
            self._outbound.abandon()  # a writer waiting for room fails, not hangs


async def connect(path: str, token: str) -> Link:
    """Open a link to the replica serving at `path`; LinkClosed if it refuses or is not there."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    outbound: SendRing | None = None
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
        if outbound is not None:
            outbound.close()
        raise LinkClosed(f"cannot connect to {path}: {err}") from None
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    return Link(reader, writer, outbound, inbound)


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
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    return Link(reader, writer, outbound, inbound)


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
