"""What the shared-memory tests look at: the rings a job's replicas hold, who else holds them,
its sockets in /proc/net/unix, and what is under /dev/shm (read as root: any process)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

from appliance.workers.transport.channels import local_address
from tests.integration.test_workers import DATAPLANE_TOKEN

RING = "/memfd:appliance-ring"


def socket_names(replicas: Iterable[str]) -> dict[str, str]:
    """The abstract socket each replica of the test job serves on, as /proc/net/unix shows it
    (without its leading NUL), by replica."""
    return {name: local_address(DATAPLANE_TOKEN, name)[1:] for name in replicas}


def rings_held(pids: Iterable[int]) -> tuple[list[tuple[int, int]], list[tuple[int, str]]]:
    """The ring descriptors (pid, fd) and ring mappings (pid, address range) of `pids`."""
    fds, spans = [], []
    for pid in pids:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(RING):
                    fds.append((pid, int(fd)))
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            if RING in line:
                spans.append((pid, line.split()[0]))
    return fds, spans


def rings_of(pids: Iterable[int]) -> set[int]:
    """The inodes of the rings `pids` hold a descriptor of or map."""
    inodes = set()
    for pid in pids:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(RING):
                    inodes.add(os.stat(f"/proc/{pid}/fd/{fd}").st_ino)
            except OSError:
                continue  # closed meanwhile
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            if RING in line:
                inodes.add(int(line.split()[4]))
    return inodes


def holders(inodes: set[int]) -> list[str]:
    """Every process on the host that holds or maps one of the rings `inodes`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith(RING) and os.stat(f"/proc/{pid}/fd/{fd}").st_ino in inodes:
                    found.append(f"pid {pid} fd {fd}")
            for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
                if RING in line and int(line.split()[4]) in inodes:
                    found.append(f"pid {pid} maps {line}")
        except OSError:
            continue  # a process that ended meanwhile, or one we may not look into
    return found


def abstract_sockets() -> set[str]:
    lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    return {line.split()[-1][1:] for line in lines if line.split()[-1].startswith("@")}


def dev_shm() -> set[str]:
    """What our user has under /dev/shm (the PostgreSQL servers of other tests have theirs)."""
    owned = set()
    for entry in os.scandir("/dev/shm"):
        with contextlib.suppress(OSError):  # gone meanwhile
            if entry.stat(follow_symlinks=False).st_uid == os.getuid():
                owned.add(entry.name)
    return owned
