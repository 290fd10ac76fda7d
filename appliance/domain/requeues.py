"""A requeue asked for and not yet done (RequeueRequest), and what a replica's call needs to
know of its job (StopState): read from the store (store/requeues.py), decided on by the loops
and the replica calls."""

from __future__ import annotations

import dataclasses
from typing import Any

from appliance.domain.phases import Phase
from appliance.domain.reasons import Reason


@dataclasses.dataclass(frozen=True)
class RequeueRequest:
    """A requeue asked for and not yet done."""

    job_id: str
    phase: Phase
    attempt: int
    reason: str
    checkpoint_by: float  # 0: no checkpoint asked for
    checkpoint_step: int | None  # the checkpoint written on request, once reported
    newest_checkpoint: int  # the newest checkpoint the chief reported (0: none)
    preempted_by: str
    reason_code: str = ""  # the code of `reason` (domain/reasons.py)

    @property
    def said(self) -> Reason:
        """`reason` with its code, to add notes to."""
        return Reason.stored_as(self.reason_code, self.reason)


@dataclasses.dataclass(frozen=True)
class StopState:
    """What a replica's call needs to know of its job."""

    phase: Phase
    attempt: int
    stopping: bool  # a requeue is asked for: the current attempt is ending
    checkpoint_wanted: bool  # the chief is asked for a checkpoint now

    @classmethod
    def of_row(cls, row: Any) -> StopState:
        """From a job row's phase, attempt, stop_reason, checkpoint_by and checkpoint_step."""
        stopping = bool(row.stop_reason)
        wanted = stopping and row.checkpoint_by > 0 and row.checkpoint_step is None
        return cls(Phase(row.phase), row.attempt, stopping, wanted)

    def is_current(self, attempt: int) -> bool:
        """Whether something of `attempt` (0: not known, e.g. adopted) is of this one."""
        return attempt in (0, self.attempt)
