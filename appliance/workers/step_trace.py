"""An opt-in timeline of a replica's data-plane hand-offs, read by `python -m bench.step_timeline`.

With APPLIANCE_STEP_TRACE=<dir> in a replica's environment, it records a wall-clock timestamp
(ns) at each hand-off of a training step (the chief's RunStep out and back; a unit's weights or
gradient in and out of a CS-2, SwarmX or MemoryX; a MemoryX update) for the steps in
[APPLIANCE_STEP_TRACE_FROM, + APPLIANCE_STEP_TRACE_STEPS), and writes them to <dir>/<replica>.tsv
when the replica closes. Replicas of one job share a host and its clock, so their events line up.
Off (the default), `mark` costs one attribute test.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

ENV_DIR = "APPLIANCE_STEP_TRACE"
ENV_FROM = "APPLIANCE_STEP_TRACE_FROM"
ENV_STEPS = "APPLIANCE_STEP_TRACE_STEPS"


class StepTrace:
    """Events (time_ns, event, step, unit) of the steps in one window."""

    def __init__(self, directory: Path | None, first: int = 0, count: int = 0) -> None:
        self.directory = directory
        self._first, self._end = first, first + count
        self.events: list[tuple[int, str, int, int]] = []

    @classmethod
    def from_env(cls) -> StepTrace:
        directory = os.environ.get(ENV_DIR)
        if not directory:
            return cls(None)
        first = int(os.environ.get(ENV_FROM, "100"))
        return cls(Path(directory), first, int(os.environ.get(ENV_STEPS, "200")))

    def mark(self, event: str, step: int, unit: int = -1) -> None:
        """Record `event` of `step` (and `unit`), if tracing and the step is in the window."""
        if self.directory is not None and self._first <= step < self._end:
            self.events.append((time.time_ns(), event, step, unit))

    def write(self, replica: str) -> None:
        """Write the events to <dir>/<replica>.tsv (nothing when off)."""
        if self.directory is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        lines = (f"{t}\t{event}\t{step}\t{unit}\n" for t, event, step, unit in self.events)
        (self.directory / f"{replica}.tsv").write_text("".join(lines))


TRACE = StepTrace.from_env()
