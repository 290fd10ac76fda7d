"""Why a job waits, moves, is requeued, fails or is cancelled: a code and its message.

Every reason a job carries is a `Reason`: a `ReasonCode` from the one enum below and the
parameters of its message. The message is rendered here, and only here (`render`), from the
code and the parameters; producers (the scheduler, the loops, the services, the store) pass a
code and parameters, never a sentence. A job shows the code beside the message (`reason_code`
for why it ended or was last moved, `pending_reason_code` for why it waits), doors send both,
and a list filters on the code (`csctl get jobs --reason Capacity`).

Codes are CamelCase strings, as Kueue's condition reasons are (`Capacity`,
`BehindHigherPriority`); a code never changes once released: scripts filter on it. Adding a
reason: a member here, its message in `_MESSAGES`, a test that its producer says it.

A reason read back from the store keeps its code and its message as written (`Reason.stored`):
its parameters are not stored, so only the notes below can be added to it later. Notes are
parameters any reason may carry, rendered after its message in one fixed order: a restart
limit reached, jobs not preempted, a checkpoint taken or given up, a queue position.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from appliance.domain.errors import InvalidSpec


class ReasonCode(enum.StrEnum):
    # Why a queued job waits (its pending reason).
    SCHEDULER = "Scheduler"  # not looked at by a scheduler pass yet
    CAPACITY = "Capacity"  # the pool has not enough free now
    BEHIND_HIGHER_PRIORITY = "BehindHigherPriority"  # behind its queue's head, which waits
    QUOTA = "Quota"  # its queue may not borrow what it needs now
    NEVER_FITS = "NeverFits"  # needs more than its queue may ever hold
    # its user's running jobs hold their cap of systems (Slurm's QOSMaxCpuPerUserLimit)
    USER_SYSTEMS = "UserRunningSystems"
    # its array runs its cap of tasks (`--array 0-31%4`; Slurm's JobArrayTaskLimit)
    ARRAY_TASK_LIMIT = "ArrayTaskLimit"
    # its user's admitted jobs in its queue are at the queue's cap (Slurm's MaxJobsPerUser)
    QUEUE_USER_JOBS = "QueueUserJobLimit"
    # its user's admitted jobs in its queue hold the queue's cap of systems (MaxTRESPerUser)
    QUEUE_USER_SYSTEMS = "QueueUserSystemLimit"
    DEPENDENCY = "Dependency"  # waits for a job it depends on
    # the nodes it would fit on are reserved (for maintenance, or for others) before it would
    # end by its time limit (Slurm's ReqNodeNotAvail, Reserved for maintenance / Reservation)
    RESERVATION = "Reservation"
    HELD_USER = "HeldUser"  # held by its user (or a member of its groups) until released
    HELD_ADMIN = "HeldAdmin"  # held by an admin: only an admin releases it
    SUSPENDED = "Suspended"  # suspended while it ran: waits, from its checkpoint, to resume
    PREEMPTING = "Preempting"  # waits for lower-priority jobs it preempts to stop
    RECLAIM = "Reclaim"  # waits for jobs borrowing its queue's quota to stop
    BACKEND = "Backend"  # scheduled; the backend cannot start replicas yet
    # Why a job was moved on (its events).
    SUBMITTED = "Submitted"
    ADMITTED = "Admitted"  # systems reserved
    STARTED = "Started"  # replicas launched
    REPLICAS_READY = "ReplicasReady"  # running
    PARAMS_WARNING = "ParamsWarning"  # at submit: a params key accepted but not used
    # Why a job was requeued.
    PREEMPTED = "Preempted"  # by a job of higher priority in its queue
    RECLAIMED = "Reclaimed"  # by a job of a queue whose quota it borrowed
    RESTARTING = "Restarting"  # after a retryable failure
    GROWING = "Growing"  # an elastic job, to resume on more systems (scheduler/elastic.py)
    REQUEUE_WITHDRAWN = "RequeueWithdrawn"  # a requeue asked for is moot: the job goes on
    # Why a job ended.
    COMPLETED = "Completed"
    REPLICA_FAILED = "ReplicaFailed"
    REPLICAS_LOST = "ReplicasLost"  # gone while no coordinator watched
    NODE_ERROR = "NodeError"  # a node under it went to error or maintenance
    NOT_READY = "NotReady"  # replicas did not register in time
    LAUNCH_FAILED = "LaunchFailed"
    LEASE_EXPIRED = "LeaseExpired"
    DEPENDENCY_FAILED = "DependencyFailed"  # a dependency can no longer be met
    CANCELLED_BY_USER = "CancelledByUser"  # its owner (or a member of its groups)
    CANCELLED_BY_ADMIN = "CancelledByAdmin"  # an admin, on someone else's job
    TIME_LIMIT = "TimeLimit"  # it ran for its time limit (TIMEOUT, as Slurm's)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' if count != 1 else ''}"


def _with(params: Mapping[str, Any], key: str, template: str) -> str:
    """`template` with the parameter `key` when it is given and not empty, else ""."""
    value = params.get(key)
    return template.format(value) if value else ""


def _reserved(p: Mapping[str, Any]) -> str:
    """Which reservations keep a job off the nodes it would fit on: the maintenance ones
    (`maint`, Slurm's "ReqNodeNotAvail, Reserved for maintenance") and the others' (`names`)."""
    maint, others = p.get("maint") or (), p.get("names") or ()
    said = [f"maintenance ({', '.join(maint)})"] if maint else []
    said += [f"others ({', '.join(others)})"] if others else []
    when = (
        "; with no time limit it would run into them"
        if p.get("unlimited")
        else " before it would end by its time limit"
    )
    return ("ReqNodeNotAvail, " if maint else "") + "Reserved for " + " and for ".join(said) + when


def _behind(p: Mapping[str, Any]) -> str:
    head = f"{p['head']} ({p['priority']}, {_plural(p['systems'], 'system')})"
    where = _with(p, "queue", " in queue {}")
    shortfall = _with(p, "shortfall", "{}; ")
    return f"{shortfall}behind {head}{where}"


def _replica_failed(p: Mapping[str, Any]) -> str:
    if p.get("while_phase"):
        return f"chief exited while the job was {p['while_phase']}"
    code, message = p.get("exit_code"), p.get("message", "")
    if p.get("away"):
        return (
            f"replica {p['replica']} exited with exit code {code} while the coordinator was away"
            + _with(p, "error", ": {}")
        )
    if code is None and message:  # never ran, or lost: the message says why
        return f"replica {p['replica']} failed: {message}"
    what = f"exit code {code}" if code is not None else "an unknown exit code"
    said_why = _with(p, "error", ": {}")  # its last error line (domain/replica_errors.py)
    return f"replica {p['replica']} exited with {what}{_with(p, 'message', ' ({})')}{said_why}"


def _restarting(p: Mapping[str, Any]) -> str:
    return (
        f"{p['failure']}; restarting from {p['resume']} (restart {p['restart']} of {p['limit']})"
    )


def _preempting(p: Mapping[str, Any]) -> str:
    names = ", ".join(f"{job} ({priority})" for job, priority in p["victims"])
    return (
        f"waiting to preempt {names}: they {'checkpoint and stop' if p['checkpoint'] else 'stop'}"
    )


def _reclaim(p: Mapping[str, Any]) -> str:
    lent = _plural(p["systems"], "system")
    return f"waiting to reclaim {lent} lent to queue {', '.join(p['queues'])} ({p['jobs']})"


# Each code's message from its parameters: the one place a reason's sentence is made.
_MESSAGES: dict[ReasonCode, Callable[[Mapping[str, Any]], str]] = {
    ReasonCode.SCHEDULER: lambda p: "waiting for the scheduler",
    ReasonCode.CAPACITY: lambda p: p["shortfall"],
    ReasonCode.BEHIND_HIGHER_PRIORITY: _behind,
    ReasonCode.QUOTA: lambda p: p["why"],
    ReasonCode.NEVER_FITS: lambda p: f"can never run: {p['why']}",
    ReasonCode.USER_SYSTEMS: lambda p: (
        f"{p['user']}'s running jobs hold {p['held']} of their {p['cap']} systems "
        f"(running_systems per user); it needs {p['systems']} and starts when theirs end"
    ),
    ReasonCode.ARRAY_TASK_LIMIT: lambda p: (
        f"{p['held']} tasks of array {p['array']} run, its cap (%{p['cap']}); it starts when "
        "one of them ends"
    ),
    ReasonCode.QUEUE_USER_JOBS: lambda p: (
        f"{p['user']} has {p['running']} of their {p['cap']} jobs running in queue "
        f"{p['queue']} (max_running_jobs_per_user); it starts when one of theirs ends"
    ),
    ReasonCode.QUEUE_USER_SYSTEMS: lambda p: (
        f"{p['user']}'s jobs in queue {p['queue']} hold {p['held']} of their {p['cap']} "
        f"systems (max_systems_per_user); it needs {p['systems']} and starts when theirs end"
    ),
    ReasonCode.RESERVATION: lambda p: _reserved(p) + _with(p, "shortfall", "; {}"),
    ReasonCode.DEPENDENCY: lambda p: f"waiting for {p['job']} ({p['phase']}) {p['wanted']}",
    ReasonCode.HELD_USER: lambda p: f"held by {p['by']}; csctl release job to let it run",
    ReasonCode.HELD_ADMIN: lambda p: f"held by {p['by']} (an admin); an admin releases it",
    ReasonCode.SUSPENDED: lambda p: (
        f"suspended by {p['by']} (an admin); an admin resumes it from its checkpoint"
        if p.get("admin")
        else f"suspended by {p['by']}; csctl resume job to go on from its checkpoint"
    ),
    ReasonCode.PREEMPTING: _preempting,
    ReasonCode.RECLAIM: _reclaim,
    ReasonCode.BACKEND: lambda p: f"waiting for the backend to start replicas: {p['error']}",
    ReasonCode.SUBMITTED: lambda p: f"submitted by {p['user']}",
    ReasonCode.ADMITTED: lambda p: "reserved" + _with(p, "systems", " {}"),
    ReasonCode.STARTED: lambda p: f"started {p['replicas']} replicas",
    ReasonCode.REPLICAS_READY: lambda p: f"all {p['replicas']} replicas ready",
    ReasonCode.PARAMS_WARNING: lambda p: (
        f"params: {p['key']} is accepted and not used: {p['instead']}"
    ),
    ReasonCode.PREEMPTED: lambda p: f"preempted by {p['by']} ({p['priority']})",
    ReasonCode.RECLAIMED: lambda p: (
        f"preempted by {p['by']} ({p['priority']}): queue {p['queue']} reclaims its quota"
    ),
    ReasonCode.RESTARTING: _restarting,
    ReasonCode.GROWING: lambda p: (
        f"requeued at a checkpoint to grow from {p['systems']} to {p['to']} CS-2 systems "
        "(idle, and no job waits for them)"
    ),
    ReasonCode.REQUEUE_WITHDRAWN: lambda p: f"{p['asked']} withdrawn: {p['why']}",
    ReasonCode.COMPLETED: lambda p: (
        "chief finished all steps" + (" while the coordinator was away" if p.get("away") else "")
    ),
    ReasonCode.REPLICA_FAILED: _replica_failed,
    ReasonCode.REPLICAS_LOST: lambda p: (
        f"replicas gone after a coordinator restart: {', '.join(p['replicas'])}"
    ),
    ReasonCode.NODE_ERROR: lambda p: (
        f"{p['kind']} {p['node']} went to {p['state']}" + _with(p, "why", ": {}")
    ),
    ReasonCode.NOT_READY: lambda p: (
        f"replicas not ready after {p['seconds']:.0f} s: {', '.join(p['replicas'])}"
    ),
    ReasonCode.LAUNCH_FAILED: lambda p: (
        "could not start replicas"
        + (f" for {p['seconds']:.0f} s" if "seconds" in p else "")
        + f": {p['error']}"
    ),
    ReasonCode.LEASE_EXPIRED: lambda p: (
        f"client lease expired: no heartbeat{_with(p, 'holder', ' from {}')} "
        f"for {p['seconds']:.0f} s"
    ),
    ReasonCode.DEPENDENCY_FAILED: lambda p: (
        f"dependency {p['job']} is {p['ended']} and this job was to run only after it "
        f"{p['met_as']}"
    ),
    ReasonCode.CANCELLED_BY_USER: lambda p: (
        p.get("text") or f"cancelled by {p.get('by') or 'user'}"
    ),
    ReasonCode.CANCELLED_BY_ADMIN: lambda p: p.get("text") or f"cancelled by {p['by']}",
    ReasonCode.TIME_LIMIT: lambda p: (
        f"time limit of {p['limit']} reached (running time, summed over its attempts)"
    ),
}


def _exempt(job: str, until: float) -> str:
    if not until:
        return f"{job} (never preempted)"
    return (
        f"{job} (preempted before: not until {time.strftime('%H:%M:%S', time.localtime(until))})"
    )


# Notes any reason may carry, after its message, in this order.
_NOTES: tuple[tuple[str, Callable[[Any], str]], ...] = (
    ("exhausted", lambda n: f" (no restarts left: {n[0]} of {n[1]} used)"),
    ("exempt", lambda n: "; not preempting " + ", ".join(_exempt(*e) for e in n)),
    ("checkpoint_within", lambda n: f"; asked for a checkpoint within {n:.0f} s"),
    (
        "died_before_checkpoint",
        lambda n: (
            f"; {n[0]} exited ({'an unknown exit code' if n[1] is None else n[1]}) before the "
            f"checkpoint; resumes from {resume_point(n[2])}"
        ),
    ),
    (
        "node_no_checkpoint",
        lambda n: f"; {n[0]}: no checkpoint awaited; resumes from {resume_point(n[1])}",
    ),
    ("checkpointed", lambda n: f"; checkpointed at step {n}"),
    (
        "no_checkpoint",
        lambda n: f"; no checkpoint within {n[0]:.0f} s: resumes from {resume_point(n[1])}",
    ),
    (
        "no_checkpoint_at_limit",
        lambda n: (
            f"; no checkpoint within {n[0]:.0f} s"
            + (f"; the newest is at step {n[1]}" if n[1] else "; it wrote none")
        ),
    ),
    ("position", lambda n: f"; requeued at position {n}"),
)


def render(code: ReasonCode | None, params: Mapping[str, Any], stored: str | None = None) -> str:
    """The message of `code` with `params` (or the message `stored` with it), and its notes."""
    if stored is not None:
        message = stored
    elif code is not None:
        message = _MESSAGES[code](params)
    else:
        message = ""
    return message + notes(params)


def notes(params: Mapping[str, Any]) -> str:
    """The notes of `params`, as they follow a message ("" when there are none)."""
    said = ""
    for name, note in _NOTES:
        if params.get(name) is not None and params.get(name) != ():
            said += note(params[name])
    return said


def resume_point(newest_checkpoint: int) -> str:
    """Where a run resumes from, said in a reason: `step 400`, or the start."""
    return f"step {newest_checkpoint}" if newest_checkpoint else "the start (no checkpoint yet)"


@dataclasses.dataclass(frozen=True, eq=False)
class Reason:
    """A reason: its code and the parameters of its message (`said`). `stored`: the message
    as read back from the store (None: rendered from the parameters)."""

    code: ReasonCode | None
    params: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    stored: str | None = None

    @functools.cached_property
    def message(self) -> str:
        return render(self.code, self.params, self.stored)

    @property
    def code_text(self) -> str:
        """The code as stored and sent ("" for a reason without one)."""
        return self.code.value if self.code is not None else ""

    def but(self, **params: Any) -> Reason:
        """The same reason with these parameters (notes, or a restart's resume point)."""
        return dataclasses.replace(self, params={**self.params, **params})

    def __str__(self) -> str:
        return self.message

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Reason):
            return NotImplemented
        return (self.code, self.message) == (other.code, other.message)

    def __hash__(self) -> int:
        return hash((self.code, self.message))

    @classmethod
    def stored_as(cls, code: str, message: str) -> Reason:
        """A reason as read back from the store: its code ("" or unknown: none) and message."""
        return cls(code_of(code), stored=message)


def said(code: ReasonCode, **params: Any) -> Reason:
    """The reason `code` with the parameters of its message."""
    return Reason(code, params)


def untagged(message: str) -> Reason:
    """A message with no code: what a store row written before codes holds (and what tests
    of the store write); no producer of the appliance makes one."""
    return Reason(None, stored=message)


def as_reason(reason: Reason | str) -> Reason:
    return reason if isinstance(reason, Reason) else untagged(reason)


def code_of(text: str) -> ReasonCode | None:
    """The code a stored or sent string names (None: none, or one this version does not
    know)."""
    try:
        return ReasonCode(text) if text else None
    except ValueError:
        return None


_BY_FOLDED = {code.value.lower(): code for code in ReasonCode} | {
    code.name.lower(): code for code in ReasonCode
}


MAX_FILTER_CODES = 64  # codes one filter may name (there are fewer codes than that)


def parse_codes(values: Iterable[str]) -> frozenset[ReasonCode]:
    """Reason codes given to a filter: each value one code or a comma list, in any case
    (`capacity`, `Capacity`, `CAPACITY` or `behind_higher_priority`); no values: no filter.
    InvalidSpec naming `reason` for an empty code (a filter that would match everything by
    mistake), more than MAX_FILTER_CODES, or a code this version does not know (listing the
    valid ones)."""
    found: set[ReasonCode] = set()
    count = 0
    for value in values:
        for part in value.split(","):
            count += 1
            if count > MAX_FILTER_CODES:
                raise InvalidSpec(
                    f"at most {MAX_FILTER_CODES} reason codes in one filter", field="reason"
                )
            name = part.strip()
            if not name:
                raise InvalidSpec(
                    f"an empty reason code; give one or more of: {', '.join(ReasonCode)}",
                    field="reason",
                )
            code = _BY_FOLDED.get(name.lower())
            if code is None:
                raise InvalidSpec(
                    f"unknown reason code {name[:40]!r}; valid codes: {', '.join(ReasonCode)}",
                    field="reason",
                )
            found.add(code)
    return frozenset(found)


assert set(_MESSAGES) == set(ReasonCode), "every code has its message"
