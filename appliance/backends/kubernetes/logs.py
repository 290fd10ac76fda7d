"""Replica logs kept on disk once their pods are gone: teardown copies each pod's log to
<log_dir>/<job>/logs/<replica>.log, and a later attempt sets the kept ones aside under the
attempt's number. Files only; the backend reads live pods' logs through the API."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path

READ_CHUNK = 1 << 20


def kept_path(log_dir: Path, job_id: str, replica: str) -> Path:
    return log_dir / job_id / "logs" / f"{replica}.log"


def set_aside(log_dir: Path, job_id: str, replicas: Iterable[str], attempt: int) -> None:
    """The kept logs of `attempt` renamed <replica>.attempt-<attempt>.log."""
    for replica in replicas:
        kept = kept_path(log_dir, job_id, replica)
        with contextlib.suppress(FileNotFoundError):
            kept.rename(kept.with_name(f"{replica}.attempt-{attempt}.log"))


def write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_bytes(data)
    partial.replace(path)


def read_from(path: Path, offset: int) -> bytes:
    with path.open("rb") as f:
        f.seek(offset)
        return f.read(READ_CHUNK)


def complete_lines(data: bytes, offset: int) -> tuple[str, int]:
    """The complete lines of `data` (read from `offset`) and the offset after them: a partial
    last line waits for its end."""
    complete = data[: data.rfind(b"\n") + 1]
    return complete.decode(errors="replace"), offset + len(complete)
