"""A wsjob's status as the store knows it: the job, its replicas, its events, its progress."""

from __future__ import annotations

import dataclasses
import enum

from appliance.domain.arrays import TaskOf
from appliance.domain.display import printable
from appliance.domain.holds import Hold
from appliance.domain.phases import Phase
from appliance.domain.plan import Role
from appliance.domain.spec import JobSpec


class ReplicaPhase(enum.StrEnum):
    PENDING = "PENDING"  # planned, not started
    STARTED = "STARTED"  # process or pod exists
    READY = "READY"  # registered with the coordinator
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"  # torn down by the coordinator


@dataclasses.dataclass(frozen=True)
class Progress:
    step: int = 0
    num_steps: int = 0
    loss: float = 0.0
    steps_per_second: float = 0.0
    samples_per_second: float = 0.0
    reported_at: float = 0.0
    # The newest checkpoint of the run (the one it resumed from until it writes one).
    checkpoint_step: int = 0
    # The checkpoint step this attempt resumed from (0: from the start).
    resumed_from_step: int = 0
    # The learning rate of the step reported (0: not reported).
    learning_rate: float = 0.0
    # The newest evaluation of the run (modes eval and train_and_eval); None before one.
    eval_loss: float | None = None
    eval_accuracy: float | None = None  # the fraction of predictions that were right
    eval_samples: int = 0  # how many samples the newest evaluation covered (0: none yet)

    def __str__(self) -> str:
        """`step 40/100  loss 0.1234  12.5 steps/s  eval loss 0.2345  accuracy 91.2%`."""
        total = f"/{self.num_steps}" if self.num_steps else ""
        parts = [f"step {self.step}{total}", f"loss {self.loss:.4f}"]
        if self.steps_per_second:
            parts.append(f"{self.steps_per_second:.1f} steps/s")
        if self.eval_loss is not None:
            parts.append(f"eval loss {self.eval_loss:.4f}")
        if self.eval_accuracy is not None:
            parts.append(f"accuracy {self.eval_accuracy:.1%}")
        if self.eval_samples:
            parts.append(f"over {self.eval_samples} samples")
        return "  ".join(parts)


@dataclasses.dataclass(frozen=True)
class Replica:
    job_id: str
    name: str
    role: Role
    index: int
    node: str
    phase: ReplicaPhase = ReplicaPhase.PENDING
    address: str = ""
    pid: int = 0
    exit_code: int | None = None
    message: str = ""
    log_tail: str = ""
    # How its data plane reaches its peers, as its heartbeat says (domain/data_plane.py).
    data_plane: str = ""


@dataclasses.dataclass(frozen=True)
class Lease:
    """A job tied to its client: cancelled when no heartbeat arrives for `lease_seconds`."""

    lease_seconds: float
    expires_at: float
    holder: str = ""


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One ended run of a job: from getting its resources to giving them back."""

    number: int
    scheduled_at: float
    started_at: float  # RUNNING; 0 if it never got there
    ended_at: float
    systems: tuple[str, ...]
    reason: str  # why it ended ("replica cs2-1 exited with exit code 137", ...)
    ended_in: Phase  # QUEUED when it was requeued, else the job's terminal phase
    resumed_from: int = 0  # the checkpoint step it began from (0: the start)


@dataclasses.dataclass(frozen=True)
class Job:
    id: str
    user: str
    spec: JobSpec
    phase: Phase
    created_at: float
    updated_at: float
    reason: str = ""
    pending_reason: str = ""
    queue_position: int = 0
    systems: tuple[str, ...] = ()
    progress: Progress = Progress()
    started_at: float = 0.0
    finished_at: float = 0.0
    replicas: tuple[Replica, ...] = ()
    lease: Lease | None = None  # None: no lease, or released because the job ended
    # The owner's groups when it submitted (who else may act on the job).
    groups: tuple[str, ...] = ()
    # Attempts begun (0 while never scheduled); the ones before the current one were requeued.
    attempt: int = 0
    # Times the job went back to the queue to run again.
    restarts: int = 0
    # Of those, the ones after failures (what max_restarts bounds; preemptions are not).
    retries: int = 0
    # The attempts that ended (full views only), first first.
    attempts: tuple[Attempt, ...] = ()
    # The jobs that wait for this one (full views only).
    dependents: tuple[str, ...] = ()
    # A queued job's estimated start (Unix time; 0: no estimate), like queue_position read
    # fresh from the queue on every call (services/start_estimates.py).
    estimated_start: float = 0.0
    # The codes of `reason` and `pending_reason` (domain/reasons.py ReasonCode; "": none).
    reason_code: str = ""
    pending_reason_code: str = ""
    # Its array, index and sweep overrides when it is an array's task (domain/arrays.py).
    array: TaskOf | None = None
    # Its hold (domain/holds.py; None: not held): a queued job held waits where it is.
    hold: Hold | None = None

    @property
    def systems_running(self) -> int:
        """The CS-2s its attempt runs on: an elastic job's size now (domain/elastic.py), the
        systems it holds (its CS-2 replicas in a view without them); num_csx otherwise."""
        cs2 = len(self.systems) or sum(1 for r in self.replicas if r.role is Role.CS2)
        return cs2 or self.spec.num_csx

    def __str__(self) -> str:
        """`wsjob-… SUCCEEDED: chief finished all steps (step 200/200  loss 2.0091)`: what
        print() of a status shows (the repr keeps every field)."""
        reason = self.pending_reason if self.phase is Phase.QUEUED else self.reason
        said = f"{self.id} {self.phase}" + (f": {reason}" if reason else "")
        if self.progress.step or self.progress.eval_loss is not None:
            said += f" ({self.progress})"
        return printable(said)


class EventKind(enum.StrEnum):
    PHASE = "phase"
    PROGRESS = "progress"


@dataclasses.dataclass(frozen=True)
class JobEvent:
    job_id: str
    kind: EventKind
    time: float
    seq: int = 0
    from_phase: Phase | None = None
    to_phase: Phase | None = None
    reason: str = ""
    progress: Progress | None = None
    reason_code: str = ""  # the code of `reason` (domain/reasons.py; "": none)

    def __str__(self) -> str:
        """`wsjob-…: QUEUED -> SCHEDULED: reserved cs2-01` or `wsjob-…: step 40/100  loss …`:
        what print() of an event shows (the repr keeps every field)."""
        if self.kind is EventKind.PROGRESS and self.progress is not None:
            return f"{self.job_id}: {self.progress}"
        before = f"{self.from_phase} -> " if self.from_phase else ""
        reason = f": {self.reason}" if self.reason else ""
        return printable(f"{self.job_id}: {before}{self.to_phase}{reason}")


def without_details(job: Job) -> Job:
    """What anyone may see of `job`: no params or model dir, and no replica's address, pid or
    log tail (what would let them reach its replicas or find and read its data)."""
    replicas = tuple(dataclasses.replace(r, address="", pid=0, log_tail="") for r in job.replicas)
    spec = dataclasses.replace(job.spec, params_yaml="", model_dir="")
    return dataclasses.replace(job, spec=spec, replicas=replicas)
