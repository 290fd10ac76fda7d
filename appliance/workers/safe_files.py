"""Writing into a model directory without following links someone else planted.

A model directory is shared with its owner, who may put anything in it: a symbolic link named
`metrics.json` made a job overwrite a root-owned 0600 file, and `metrics.jsonl` was appended
the same way. So every file a replica writes there is made through a descriptor of the
directory, reached from `/` one component at a time without following a link (the coordinator
stores model dirs and checkpoint paths canonical, services/model_dirs.py, so a link on the way
was put there after the check): whole files are written under a fresh name (created with
O_EXCL|O_NOFOLLOW) and renamed over the old one, which replaces a link rather than writing
through it; files appended to are opened with O_NOFOLLOW and must have a single link; a
checkpoint to resume from is read the same way. The rule of the way there is
appliance/safe_paths.py's, which the coordinator checks at submit too.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from appliance.safe_paths import UnsafePath as UnsafePath
from appliance.safe_paths import open_regular, walk

_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_APPEND = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def directory(path: Path) -> contextlib.AbstractContextManager[int]:
    """A descriptor of `path` (made if missing), refused if any component of it is a link."""
    return _held(path, make=True)


def open_read(path: Path) -> BinaryIO:
    """`path` opened for reading, refused if any component of it is a link."""
    return os.fdopen(open_regular(path), "rb")


def directory_of(path: Path) -> contextlib.AbstractContextManager[int]:
    """A descriptor of the existing directory holding `path`, reached without links."""
    return _held(path.parent, make=False)


@contextlib.contextmanager
def _held(path: Path, make: bool) -> Iterator[int]:
    fd = walk(path, make)
    try:
        yield fd
    finally:
        os.close(fd)


def write_whole(path: Path, write: Callable[[BinaryIO], object], *, durable: bool = False) -> None:
    """Replace `path` with what `write` writes to a new file beside it."""
    with directory(path.parent) as folder:
        partial = f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        fd = os.open(partial, _NEW, 0o644, dir_fd=folder)
        try:
            with os.fdopen(fd, "wb") as file:
                write(file)
                if durable:
                    file.flush()
                    os.fsync(file.fileno())
            os.replace(partial, path.name, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(partial, dir_fd=folder)
            raise
        if durable:
            os.fsync(folder)


def open_append(path: Path) -> BinaryIO:
    """`path` opened for appending, created if missing; never through a link."""
    with directory(path.parent) as folder:
        try:
            fd = os.open(path.name, _APPEND, 0o644, dir_fd=folder)
        except OSError as exc:
            raise UnsafePath(f"{path} cannot be appended to: {exc.strerror}") from None
    found = os.fstat(fd)
    if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1:
        os.close(fd)
        raise UnsafePath(
            f"{path} is not a regular file of its own (another hard link, a FIFO, a device); "
            "a job appends only to its own files"
        )
    os.set_blocking(fd, True)
    return os.fdopen(fd, "ab")
