"""The cap of an array's tasks running at once in admission (`--array 0-31%4`, Slurm's `%N`).

A task whose array has its cap of tasks admitted (SCHEDULED, INITIALIZING, RUNNING) stays
queued with ArrayTaskLimit and is stepped over, as scheduler/user_caps.py steps over a job
over its user's cap: it is never its queue's head and holds nothing back. Pure: the pass is
given, for each capped array with a task queued, its cap and how many of its tasks hold
resources as it starts; what it admits counts at once, so one pass never passes a cap.
"""

from __future__ import annotations

from collections.abc import Mapping

from appliance.domain.arrays import array_of
from appliance.domain.backlog import QueuedJob
from appliance.domain.reasons import Reason, ReasonCode, said


class ArrayCaps:
    """Each capped array's cap and tasks admitted, through one pass. `caps`: array id → (cap,
    tasks holding resources as the pass starts)."""

    def __init__(self, caps: Mapping[str, tuple[int, int]]) -> None:
        self._caps = {array: cap for array, (cap, _) in caps.items()}
        self._held = {array: held for array, (_, held) in caps.items()}

    def _array(self, job: QueuedJob) -> str | None:
        if "_" not in job.job_id:  # most jobs: no parse
            return None
        found = array_of(job.job_id)
        return found[0] if found is not None and found[0] in self._caps else None

    def refusal(self, job: QueuedJob) -> Reason | None:
        """Why `job` may not start now for its array's cap (None: it may)."""
        array = self._array(job)
        if array is None:
            return None
        cap, held = self._caps[array], self._held[array]
        if held < cap:
            return None
        return said(ReasonCode.ARRAY_TASK_LIMIT, array=array, held=held, cap=cap)

    def take(self, job: QueuedJob) -> None:
        """`job` was admitted: it counts against its array's cap in the rest of the pass."""
        array = self._array(job)
        if array is not None:
            self._held[array] += 1
