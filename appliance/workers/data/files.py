"""Reaching a data directory's files without following links, and reading them bounded.

A data directory is the user's: it may hold anything. It is reached from `/` one component at
a time without following a link (appliance/safe_paths.py's rule); its entries are listed from
that descriptor (at most MAX_ENTRIES), and a file is opened by name in it with O_NOFOLLOW (a
link is refused, not followed) and O_NONBLOCK (a FIFO planted under a data file's name must not
hang the open), then must be a regular file of at most MAX_FILE_BYTES. Whatever goes wrong is a
DataError naming the file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from appliance.safe_paths import UnsafePath, walk
from appliance.workers.data.errors import DataError

# How many entries a data directory may hold, and how large one file may be.
MAX_ENTRIES = 10_000
MAX_FILE_BYTES = 4 << 30
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@contextlib.contextmanager
def data_directory(path: Path) -> Iterator[int]:
    """A descriptor of the data directory `path`, reached without following a link."""
    try:
        fd = walk(path, make=False)
    except UnsafePath as exc:
        raise DataError(f"data_dir {path} {_reason(str(exc), path)}") from None
    try:
        yield fd
    finally:
        os.close(fd)


def subdirectory(folder: int, name: str, path: Path) -> int | None:
    """A descriptor of the directory `name` in `folder` (None if there is none), not a link."""
    try:
        return os.open(name, _DIR, dir_fd=folder)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise DataError(f"{path / name} is a symbolic link or not a directory") from None
        raise DataError(f"{path / name} cannot be read: {exc.strerror}") from None


def entries(folder: int, path: Path) -> list[str]:
    """The names in the directory `folder` (which is `path`), sorted; at most MAX_ENTRIES."""
    names: list[str] = []
    try:
        with os.scandir(folder) as listing:
            for entry in listing:
                if len(names) == MAX_ENTRIES:
                    raise DataError(
                        f"data_dir {path} holds more than {MAX_ENTRIES} entries; "
                        "split the data set into fewer, larger files"
                    )
                names.append(entry.name)
    except OSError as exc:
        raise DataError(f"data_dir {path} cannot be listed: {exc.strerror}") from None
    return sorted(names)


def open_file(folder: int, name: str, path: Path) -> tuple[int, int]:
    """A blocking descriptor of the regular file `name` in `folder` and its size in bytes."""
    where = path / name
    try:
        fd = os.open(name, _READ, dir_fd=folder)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise DataError(f"{where} is a symbolic link; data files are not followed") from None
        raise DataError(f"{where} cannot be read: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise DataError(f"{where} is not a regular file (a {_kind(info.st_mode)})")
    if info.st_size > MAX_FILE_BYTES:
        os.close(fd)
        raise DataError(f"{where} has {info.st_size} bytes, more than {MAX_FILE_BYTES}")
    os.set_blocking(fd, True)
    return fd, info.st_size


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISDIR(mode):
        return "directory"
    return "special file"


def _reason(message: str, path: Path) -> str:
    """UnsafePath's sentence without the path it starts with (ours names it once)."""
    return message.removeprefix(str(path)).strip() or message
