"""A hostile local user's attempts on a running job's shared memory (the standard library
only: it runs as another user, `python -I -S hostile_probe.py`, given a JSON request on stdin
and answering JSON on stdout). test_workers_shared_memory_security.py runs it.

`attack` mode: look for the job under /dev/shm; find the data-plane sockets in
/proc/net/unix and knock on each (the job's real token, a guessed one, nothing at all),
counting every descriptor that comes back; open the replicas' ring descriptors through
/proc/<pid>/fd, their mappings through /proc/<pid>/map_files, take a descriptor with
pidfd_getfd, read /proc/<pid>/environ and /proc/<pid>/mem. Each attempt is reported with its
outcome: "refused: ..." or what it got.

`squat` mode: bind the abstract name a replica would serve on (as if it had died and this
user had seen its name), print "listening", and report every byte a connecting replica sends.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import json
import os
import socket
import struct
import sys
from typing import Any

GREETING = b"appliance-dataplane-1\n"
SOCKET_PREFIX = "@appliance-dataplane-"
_PIDFD_GETFD = 438  # the syscall's number on x86-64 and arm64


def knock(name: str, token: bytes | None, within: float) -> dict[str, Any]:
    """Connect to the abstract socket `name`, present `token` (None: say nothing), and read
    all that comes back until the server closes the connection."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(within)
    received, descriptors = b"", 0
    try:
        sock.connect("\0" + name)
        if token is not None:
            # Turned away before it spoke (a broken pipe): it reads what it was told.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(GREETING + struct.pack("<H", len(token)) + token)
        while True:
            fds = array.array("i")
            data, ancillary, _, _ = sock.recvmsg(4096, socket.CMSG_SPACE(16 * fds.itemsize))
            for level, kind, payload in ancillary:
                if (level, kind) == (socket.SOL_SOCKET, socket.SCM_RIGHTS):
                    fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
            descriptors += len(fds)
            for fd in fds:
                os.close(fd)
            if not data:
                return {"received": received.decode(errors="replace"), "fds": descriptors,
                        "closed": True}  # fmt: skip
            received += data
    except ConnectionResetError:  # closed with what it sent unread: closed all the same
        return {"received": received.decode(errors="replace"), "fds": descriptors,
                "closed": True}  # fmt: skip
    except OSError as err:  # refused, or no answer in time
        return {"received": received.decode(errors="replace"), "fds": descriptors,
                "closed": False, "error": f"{type(err).__name__}: {err}"}  # fmt: skip
    finally:
        sock.close()


def try_open(path: str, flags: int = os.O_RDONLY) -> str:
    try:
        fd = os.open(path, flags)
    except OSError as err:
        return f"refused: {err.strerror}"
    try:
        return f"OPENED, read {len(os.read(fd, 64))} bytes"
    except OSError as err:
        return f"OPENED, read refused: {err.strerror}"
    finally:
        os.close(fd)


def try_list(path: str) -> str:
    try:
        return f"LISTED {sorted(os.listdir(path))}"
    except OSError as err:
        return f"refused: {err.strerror}"


def try_getfd(pid: int, fd: int) -> str:
    """pidfd_getfd(2): a copy of another process's descriptor, if ptrace would be allowed."""
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as err:
        return f"refused: pidfd_open: {err.strerror}"
    try:
        taken = libc.syscall(_PIDFD_GETFD, pidfd, fd, 0)
        if taken < 0:
            return f"refused: {os.strerror(ctypes.get_errno())}"
        os.close(taken)
        return "TOOK the descriptor"
    finally:
        os.close(pidfd)


def dataplane_sockets() -> list[str]:
    with open("/proc/net/unix") as table:
        names = {line.split()[-1] for line in table.readlines()[1:] if len(line.split()) >= 8}
    return sorted(n[1:] for n in names if n.startswith(SOCKET_PREFIX))


def attack(request: dict[str, Any]) -> dict[str, Any]:
    report: dict[str, Any] = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups()}
    report["dev_shm"] = {
        name: try_open(os.path.join("/dev/shm", name)) for name in os.listdir("/dev/shm")
    }
    found = dataplane_sockets()
    report["sockets"] = {
        name: {
            "real token": knock(name, request["token"].encode(), request["within"]),
            "guessed token": knock(name, b"guessed-token", request["within"]),
            "silence": knock(name, None, request["within"]),
        }
        for name in found
        if name in request["sockets"]  # the job's own: others' jobs are none of its business
    }
    report["found_sockets"] = found
    attempts: dict[str, str] = {}
    for pid, fd in request["fds"]:
        attempts[f"/proc/{pid}/fd/{fd}"] = try_open(f"/proc/{pid}/fd/{fd}")
        attempts[f"pidfd_getfd({pid}, {fd})"] = try_getfd(pid, fd)
    for pid, span in request["map_files"]:
        attempts[f"/proc/{pid}/map_files/{span}"] = try_open(f"/proc/{pid}/map_files/{span}")
    for pid in request["pids"]:
        attempts[f"/proc/{pid}/fd"] = try_list(f"/proc/{pid}/fd")
        attempts[f"/proc/{pid}/map_files"] = try_list(f"/proc/{pid}/map_files")
        attempts[f"/proc/{pid}/environ"] = try_open(f"/proc/{pid}/environ")
        attempts[f"/proc/{pid}/mem"] = try_open(f"/proc/{pid}/mem")
    report["attempts"] = attempts
    return report


def squat(request: dict[str, Any]) -> dict[str, Any]:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + request["name"])
    listener.listen(4)
    listener.settimeout(request["within"])
    print("listening", flush=True)
    heard = b""
    try:
        connection, _ = listener.accept()
        connection.settimeout(request["within"])
        with connection:
            while data := connection.recv(4096):
                heard += data
    except OSError as err:
        return {"heard": heard.decode(errors="replace"), "error": str(err)}
    return {"heard": heard.decode(errors="replace")}


if __name__ == "__main__":
    asked = json.load(sys.stdin)
    answer = attack(asked) if asked["mode"] == "attack" else squat(asked)
    print(json.dumps(answer), flush=True)
