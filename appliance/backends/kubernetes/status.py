"""What a replica pod's status means for its replica (pure: a pod as the API returns it).

A pod is *waiting* until its container runs, *running* while it does, and *ended* once the
container terminated or the pod failed without ever running it (evicted, rejected by the
node). The exit code follows the container's, so 137 is a SIGKILL and OOMKilled is named. A
pod that ended without its container ending (evicted, lost with its node, deleted) was *lost*:
a retryable failure (domain/restarts.py), like a replica killed by a signal.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from appliance.backends.kubernetes.manifests import (
    CONTAINER,
    LABEL_ATTEMPT,
    LABEL_JOB,
    LABEL_REPLICA,
)
from appliance.domain.replica_errors import MAX_ERROR_READ, error_line, says_why

UNSCHEDULABLE = "Unschedulable"
# What a container that ended says of itself when nothing went out of the ordinary.
_PLAIN_ENDS = frozenset({"Error", "Completed"})
# Waiting reasons that will not fix themselves; after the pending timeout the replica fails.
STUCK_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        # No node can hold the pod now (kube-scheduler's PodScheduled=False condition, e.g.
        # "0/1 nodes are available: 1 Insufficient cpu"); pods ending elsewhere may free room
        # before the timeout.
        UNSCHEDULABLE,
    }
)


class PodState(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    ENDED = "ended"


@dataclasses.dataclass(frozen=True)
class PodView:
    """The part of a pod the backend acts on."""

    name: str
    job_id: str
    replica: str
    state: PodState
    exit_code: int | None = None
    reason: str = ""
    message: str = ""
    deleting: bool = False
    attempt: int = 0  # the job's attempt the pod was made for (0: not labelled)
    lost: bool = False  # ended without its container ending: evicted, node lost, deleted
    # A container that failed by itself: the last line of its termination message (the line
    # the worker wrote, or its log's last: manifests.py), bounded and escaped.
    last_error: str = ""

    @property
    def stuck(self) -> bool:
        return self.state is PodState.WAITING and self.reason in STUCK_REASONS

    def describe(self) -> str:
        """A short phrase for a replica's message: `OOMKilled`, `ErrImagePull: ...` (not a
        container's plain `Error` or `Completed`: its exit code says that)."""
        reason = "" if self.reason in _PLAIN_ENDS else self.reason
        return ": ".join(part for part in (reason, self.message) if part)


def view_of(pod: dict[str, Any]) -> PodView | None:
    """The view of a replica pod, or None for a pod without our labels."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    job_id, replica = labels.get(LABEL_JOB), labels.get(LABEL_REPLICA)
    if not job_id or not replica:
        return None
    status = pod.get("status") or {}
    deleting = bool(meta.get("deletionTimestamp"))
    attempt = str(labels.get(LABEL_ATTEMPT, ""))
    base: dict[str, Any] = {
        "name": meta.get("name", ""), "job_id": job_id, "replica": replica,
        "attempt": int(attempt) if attempt.isdigit() and len(attempt) < 10 else 0,
    }  # fmt: skip
    container = _container_status(status)
    state = (container or {}).get("state") or {}
    if "terminated" in state:
        ended = state["terminated"] or {}
        code = ended.get("exitCode")
        # The termination message is the replica's own (manifests.py): its last line says why
        # a failure happened; of one killed by a signal it is only the log's tail.
        said = str(ended.get("message") or "")[-MAX_ERROR_READ:] if says_why(code) else ""
        return PodView(
            **base,
            state=PodState.ENDED,
            exit_code=code,
            reason=ended.get("reason") or "",
            deleting=deleting,
            last_error=error_line(said),
        )
    phase = status.get("phase") or "Pending"
    if phase in ("Failed", "Succeeded"):  # ended without a container status: evicted, rejected
        return PodView(
            **base,
            state=PodState.ENDED,
            exit_code=0 if phase == "Succeeded" else None,
            reason=status.get("reason") or phase,
            message=_short(status.get("message")),
            deleting=deleting,
            lost=phase == "Failed",
        )
    if "running" in state:
        return PodView(**base, state=PodState.RUNNING, deleting=deleting)
    waiting = state.get("waiting") or {}
    if not waiting.get("reason"):  # not on a node yet: the scheduler's condition says why
        waiting = _unscheduled(status)
    return PodView(
        **base,
        state=PodState.WAITING,
        reason=waiting.get("reason") or "",
        message=_short(waiting.get("message")),
        deleting=deleting,
    )


def _container_status(status: dict[str, Any]) -> dict[str, Any] | None:
    for container in status.get("containerStatuses") or []:
        if container.get("name") == CONTAINER:
            return dict(container)
    return None


def _unscheduled(status: dict[str, Any]) -> dict[str, str]:
    """The reason and message of a PodScheduled=False condition (none: {}). The message loses
    its "preemption: ..." tail, which says only that preempting would not help."""
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            message = str(condition.get("message") or "").split(" preemption: ", 1)[0]
            return {
                "reason": str(condition.get("reason") or UNSCHEDULABLE),
                "message": message.strip().removesuffix("."),
            }
    return {}


def _short(text: object, limit: int = 300) -> str:
    return str(text or "").strip()[:limit]
