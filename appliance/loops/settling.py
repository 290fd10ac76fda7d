"""Failures that are consequences wait a moment for their cause.

When a CS-2 is killed, the chief's next call to it fails and the chief ends too, with
EXIT_PEER_FAILED. Which of the two ends reaches the coordinator first is a race (on
Kubernetes the kubelet reports both pods in the same relist, in either order), yet the job
must be judged by the cause: the CS-2 killed by a signal is retryable, a plain failure is not.
So a consequence is held for `window` seconds; the cause, when it comes, decides and drops it;
a consequence nobody explains in time decides by itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.backends.base import ReplicaEvent
from appliance.domain.reasons import Reason


@dataclass(frozen=True)
class HeldFailure:
    """A replica's end that a cause may still explain."""

    event: ReplicaEvent
    reason: Reason
    due: float


class ConsequentFailures:
    """The held consequences, one per job (the first: later ones say the same)."""

    def __init__(self, window: float) -> None:
        self.window = window
        self._held: dict[str, HeldFailure] = {}

    def hold(self, event: ReplicaEvent, reason: Reason, now: float) -> None:
        self._held.setdefault(event.job_id, HeldFailure(event, reason, now + self.window))

    def drop(self, job_id: str) -> None:
        """The job's cause came, or the job ended otherwise."""
        self._held.pop(job_id, None)

    def due(self, now: float) -> list[HeldFailure]:
        """The consequences no cause explained in time, taken out."""
        late = [held for held in self._held.values() if now >= held.due]
        for held in late:
            del self._held[held.event.job_id]
        return late
