"""Synthetic replica logs of the simulated backend, kept in memory and bounded.

Each replica's log keeps its last MAX_LINES lines, addressed by byte offsets counted from its
first line ever (what read_log's callers page with: an offset past lines dropped since reads
on from the oldest kept). Logs of at most MAX_JOBS jobs are kept, the oldest dropped first.
"""

from __future__ import annotations

from collections import OrderedDict, deque

MAX_LINES = 200
MAX_JOBS = 4096  # more than a 2,048-system pool runs at once


class ReplicaLog:
    def __init__(self) -> None:
        self._lines: deque[str] = deque()
        self._start = 0  # offset of the oldest kept line
        self._end = 0

    def write(self, line: str) -> None:
        self._lines.append(line + "\n")
        self._end += len(self._lines[-1].encode())
        while len(self._lines) > MAX_LINES:
            self._start += len(self._lines.popleft().encode())

    def tail(self, lines: int) -> str:
        kept = list(self._lines)[-lines:] if lines > 0 else []
        return "".join(kept).removesuffix("\n")

    def read(self, offset: int) -> tuple[str, int]:
        """The lines from `offset` on (from the next line when it falls inside one) and the
        offset after them."""
        if offset >= self._end:
            return "", offset
        position, text = self._start, []
        for line in self._lines:
            if position >= offset:
                text.append(line)
            position += len(line.encode())
        return "".join(text), self._end


class JobLogs:
    """The logs of the jobs seen last, by job and replica."""

    def __init__(self) -> None:
        self._jobs: OrderedDict[str, dict[str, ReplicaLog]] = OrderedDict()

    def write(self, job_id: str, replica: str, line: str) -> None:
        job = self._jobs.get(job_id)
        if job is None:
            job = self._jobs[job_id] = {}
            while len(self._jobs) > MAX_JOBS:
                self._jobs.popitem(last=False)
        job.setdefault(replica, ReplicaLog()).write(line)

    def get(self, job_id: str, replica: str) -> ReplicaLog | None:
        return self._jobs.get(job_id, {}).get(replica)
