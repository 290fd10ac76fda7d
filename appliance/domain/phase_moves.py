"""A phase change asked for (PhaseMove) and what came of it (PhaseChange): what the phase
writer (store/phase_writes.py) takes and returns, and the Context announces."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from appliance.domain.job import JobEvent
from appliance.domain.phases import Outcome, Phase
from appliance.domain.reasons import Reason, as_reason


@dataclasses.dataclass(frozen=True)
class PhaseMove:
    """A phase change asked for: `job_id` to `target`, decided on `expected` (compare-and-set;
    None: from whatever phase the job is in). `reason` is recorded with the event (a plain
    string, as tests of the store give, is a message without a code)."""

    job_id: str
    target: Phase
    reason: Reason
    expected: Phase | None = None
    # More columns of the job's row written with the move (a schedule's systems).
    columns: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", as_reason(self.reason))


@dataclasses.dataclass(frozen=True)
class PhaseChange:
    """The outcome of a phase change, and the event it recorded when it was applied."""

    outcome: Outcome
    event: JobEvent | None = None

    @property
    def applied(self) -> bool:
        return self.outcome is Outcome.APPLIED
