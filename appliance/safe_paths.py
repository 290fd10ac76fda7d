"""The rule a path of a job's must pass, shared by the replicas that use it and the coordinator
that checks it at submit, so that what one refuses the other refuses too.

A model directory is reached from `/` one component at a time without following a link, each
component a directory (workers/safe_files.py writes and reads through the descriptor this
gives); a missing part is made by the replica that needs it. A checkpoint to resume from is a
regular file in such a directory, opened without following a link. The coordinator stores a
job's paths canonical (services/model_dirs.py) and checks at submit, off the event loop, that
the replicas will be able to use them (`check_job_dir`, `check_job_file`): a path the job
could not make, write or read is refused then, naming its field, instead of failing the job's
replicas once systems are reserved.

Plain `os` only: this module imports nothing of the appliance, so every layer may import it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# A checkpoint is an .npz, a zip archive: its first bytes are a local file header (or, with no
# arrays, the end of the central directory).
_NPZ_STARTS = (b"PK\x03\x04", b"PK\x05\x06")


class UnsafePath(OSError):
    """A path a job may not use; says which and why."""


def walk(path: Path, make: bool) -> int:
    """A descriptor of the directory `path`, reached without following a link; its missing
    components made (0755) if `make`, else refused."""
    fd, missing = _reach(path)
    try:
        for part in missing:
            if not make:
                raise UnsafePath(f"{path} does not exist")
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
            step = os.open(part, _DIR, dir_fd=fd)
            os.close(fd)
            fd = step
    except UnsafePath:
        os.close(fd)
        raise
    except OSError as exc:
        os.close(fd)
        raise _unusable(path, exc) from None
    return fd


def open_regular(path: Path) -> int:
    """A descriptor of the regular file `path` open for reading (blocking), reached without
    following a link."""
    folder = walk(path.parent, make=False)
    try:  # O_NONBLOCK: a FIFO planted under the name must not hang the open
        fd = os.open(path.name, _READ, dir_fd=folder)
    except OSError as exc:
        raise UnsafePath(f"{path} cannot be read: {exc.strerror}") from None
    finally:
        os.close(folder)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafePath(f"{path} is not a regular file")
    os.set_blocking(fd, True)
    return fd


def check_job_dir(path: Path) -> None:
    """Refuse (UnsafePath) a model directory a job's replicas could not make or write: what
    exists of it is reached as `walk` reaches it, and an entry can be made in the deepest
    existing directory (a probe directory, made and removed at once)."""
    fd, _ = _reach(path)
    probe = f".appliance-probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        os.mkdir(probe, 0o700, dir_fd=fd)
        os.rmdir(probe, dir_fd=fd)
    except OSError as exc:
        raise _unusable(path, exc) from None
    finally:
        os.close(fd)


def check_data_dir(path: Path) -> None:
    """Refuse (UnsafePath) a data set's directory a job's input workers could not read: it
    must exist and be reached as `walk` reaches it (each component a directory, no link)."""
    os.close(walk(path, make=False))


def check_job_file(path: Path) -> None:
    """Refuse (UnsafePath) a checkpoint a job's replicas could not read, or that is no .npz."""
    fd = open_regular(path)
    try:
        head = os.pread(fd, len(_NPZ_STARTS[0]), 0)
    except OSError as exc:
        raise UnsafePath(f"{path} cannot be read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if not is_npz_start(head):
        raise UnsafePath(not_npz(path))


def is_npz_start(head: bytes) -> bool:
    """Whether a file's first bytes may begin an .npz (a zip archive)."""
    return head.startswith(_NPZ_STARTS)


def not_npz(path: Path) -> str:
    """The sentence for a checkpoint that is no .npz (numpy's own suggests allow_pickle)."""
    return f"{path} is not an .npz checkpoint (a zip archive a job wrote)"


def _reach(path: Path) -> tuple[int, list[str]]:
    """A descriptor of the deepest existing directory on the way to `path` (reached without
    following a link) and the components after it, which do not exist."""
    if not path.is_absolute():
        raise UnsafePath(f"{path} is not an absolute path")
    parts = path.parts[1:]
    if any(part in {".", ".."} for part in parts):
        raise UnsafePath(f"{path} is not a canonical path")
    fd = os.open("/", _DIR)
    try:
        for at, part in enumerate(parts):
            try:
                step = os.open(part, _DIR, dir_fd=fd)
            except FileNotFoundError:
                return fd, list(parts[at:])
            os.close(fd)
            fd = step
    except OSError as exc:
        os.close(fd)
        raise _unusable(path, exc) from None
    return fd, []


def _unusable(path: Path, exc: OSError) -> UnsafePath:
    why = exc.strerror
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        why = "a symbolic link on the way, or not a directory"
    return UnsafePath(f"{path} is not a directory a job may use: {why}")
