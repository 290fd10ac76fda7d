"""The one state machine of a wsjob.

QUEUED -> SCHEDULED -> INITIALIZING -> RUNNING -> SUCCEEDED, and FAILED or CANCELLED from any
non-terminal phase; TIMEOUT (Slurm's) from a phase that holds resources, when the job's time
limit is reached (domain/time_limits.py). A job that must stop and run again (restarted after a
failure, preempted, its system taken away) goes back to QUEUED from any phase that holds
resources: it gives them back and keeps its place (its submit time orders it). Each stay in
SCHEDULED..RUNNING is an attempt. Terminal phases never change. Only the store's phase writer
(appliance.store.phase_writes, through JobStore.set_phase, set_phases and schedule) applies
transitions, and it checks every one against TRANSITIONS with compare-and-set.
"""

from __future__ import annotations

import enum


class Phase(enum.StrEnum):
    QUEUED = "QUEUED"
    SCHEDULED = "SCHEDULED"
    INITIALIZING = "INITIALIZING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"  # it ran for its time limit (domain/time_limits.py)

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED, Phase.TIMEOUT})
ACTIVE = frozenset(Phase) - TERMINAL
# Phases in which the job holds reserved resources.
HOLDS_RESOURCES = frozenset({Phase.SCHEDULED, Phase.INITIALIZING, Phase.RUNNING})

_FORWARD = [
    (Phase.QUEUED, Phase.SCHEDULED),
    (Phase.SCHEDULED, Phase.INITIALIZING),
    (Phase.INITIALIZING, Phase.RUNNING),
    (Phase.RUNNING, Phase.SUCCEEDED),
]
TRANSITIONS: frozenset[tuple[Phase, Phase]] = frozenset(
    _FORWARD
    + [(p, Phase.QUEUED) for p in HOLDS_RESOURCES]  # requeue: another attempt later
    + [(p, Phase.FAILED) for p in ACTIVE]
    + [(p, Phase.CANCELLED) for p in ACTIVE]
    + [(p, Phase.TIMEOUT) for p in HOLDS_RESOURCES]  # its time limit reached
)


def can_transition(current: Phase, target: Phase) -> bool:
    return (current, target) in TRANSITIONS


class Outcome(enum.Enum):
    """What a phase change did (it never silently does nothing)."""

    APPLIED = "applied"
    ALREADY = "already"  # the job was already in the target phase
    LOST = "lost"  # the job left the expected phase before we wrote
    INVALID = "invalid"  # the transition is not in the table


def check_move(current: Phase, target: Phase, expected: Phase | None = None) -> Outcome:
    """What moving a job that is in `current` to `target` does, for a caller that decided on
    `expected` (None: on whatever phase the job is in): APPLIED when the move may be written."""
    if expected is not None and current is not expected:
        return Outcome.ALREADY if current is target else Outcome.LOST
    if current is target:
        return Outcome.ALREADY
    if not can_transition(current, target):
        return Outcome.INVALID
    return Outcome.APPLIED
