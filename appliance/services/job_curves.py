"""A job's curves read from its model directory (domain/curves.py says what they are).

The model directory is its owner's, who may plant anything in it, so the coordinator reads
`metrics.jsonl` there as the replicas write it (workers/safe_files.py): model dirs are stored
canonical (services/model_dirs.py), so the directory is reached from `/` one component at a
time without following a link (a link on the way was put there after the check); the file is
opened without following one, without waiting on a FIFO planted under its name, and must be a
regular file. It is read bounded: at most MAX_BYTES, a larger file in WINDOWS evenly spaced
parts, so the curves still run from the first step to the last (thinned).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import PurePosixPath

from appliance.domain.curves import METRICS_FILE, Curves, curves_from_lines

MAX_BYTES = 4 << 20
MAX_EARLIER = 8  # earlier runs looked at for a job whose run a later one set aside
EARLIER_RUNS = "earlier_runs"  # as workers/model_dir_runs.py names it
WINDOWS = 64
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def read_curves(model_dir: str, job: str = "") -> Curves:
    """The curves `job` wrote in `model_dir`'s metrics.jsonl, or in the newest of the
    earlier runs a later job set aside there (earlier_runs/<n>/, at most MAX_EARLIER looked
    at); none when there is no such file (yet), and a `problem` when there is one that may
    not or cannot be read. Blocking: run it off the event loop."""
    if not model_dir:
        return Curves()
    folder = PurePosixPath(model_dir)
    found = _read(folder, job)
    if found is not None:
        return found
    for earlier in _earlier_runs(folder)[:MAX_EARLIER]:
        found = _read(earlier, job)
        if found is not None:
            return found
    return Curves()


def _read(folder: PurePosixPath, job: str) -> Curves | None:
    """The curves of `job` in `folder`'s metrics.jsonl; None when they are not there."""
    try:
        fd = _open_without_links(folder / METRICS_FILE)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return Curves(problem=f"{METRICS_FILE} cannot be read: {_why(exc)}")
    try:
        size = os.fstat(fd).st_size
        if size <= MAX_BYTES:
            return curves_from_lines(_lines(os.pread(fd, size, 0), first=True), job=job)
        part = MAX_BYTES // WINDOWS
        lines: list[bytes] = []
        for i in range(WINDOWS):
            at = i * (size - part) // (WINDOWS - 1)
            lines.extend(_lines(os.pread(fd, part, at), first=at == 0))
        return curves_from_lines(lines, partial=True, job=job)
    except OSError as exc:
        return Curves(problem=f"{METRICS_FILE} cannot be read: {_why(exc)}")
    finally:
        os.close(fd)


def _earlier_runs(folder: PurePosixPath) -> list[PurePosixPath]:
    """earlier_runs/<n>/ of the model dir, newest (highest n) first; a listing only: each is
    then opened without following links as the model dir is."""
    try:
        names = os.listdir(folder / EARLIER_RUNS)
    except OSError:
        return []
    runs = sorted((int(n) for n in names if n.isdigit() and len(n) < 10), reverse=True)
    return [folder / EARLIER_RUNS / str(n) for n in runs]


def _lines(data: bytes, *, first: bool) -> list[bytes]:
    """The whole lines of a part of the file: a line cut at either end is left out (a part
    that does not start the file starts inside a line; the file's last line may be one being
    written)."""
    lines = data.split(b"\n")
    lines.pop()  # after the last newline: a line still being written, or nothing
    return lines if first else lines[1:]


def _open_without_links(path: PurePosixPath) -> int:
    if not path.is_absolute():
        raise OSError(errno.EINVAL, "the model dir is not an absolute path")
    folder = os.open("/", _DIR)
    try:
        for part in path.parent.parts[1:]:
            if part in {".", ".."}:
                raise OSError(errno.EINVAL, "the model dir is not a canonical path")
            inner = os.open(part, _DIR, dir_fd=folder)
            os.close(folder)
            folder = inner
        fd = os.open(path.name, _FILE, dir_fd=folder)
    finally:
        os.close(folder)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "it is not a regular file")
    return fd


def _why(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:  # O_NOFOLLOW's answer to a link
        return "it is a symbolic link"
    if exc.errno == errno.ENOTDIR:  # with O_DIRECTORY, also to a link
        return "a symbolic link or a file is where a directory of its path should be"
    return exc.strerror or str(exc)
