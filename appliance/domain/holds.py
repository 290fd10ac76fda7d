"""Holds and suspensions of jobs (Slurm's `scontrol hold/release/suspend/resume`, #37).

A hold is a mark on a queued job, not a phase: the job keeps its place in its queue, and
admission steps over it (it is never a head and holds nothing back) until it is released,
when it takes its place again. A user holds and releases their own jobs (or their groups');
an admin anyone's, and an admin's hold only an admin releases. A suspension is a hold put on
a running job: it checkpoints, gives its systems back and waits in the queue, held, until it
is resumed (released), and then goes on from that checkpoint.

Pure: who may do what, and the hold a caller puts; the store writes it (store/holds.py).
"""

from __future__ import annotations

import dataclasses
import enum

from appliance.domain.auth import Principal, check_may_act_on
from appliance.domain.errors import Conflict, PermissionDenied
from appliance.domain.phases import Phase
from appliance.domain.reasons import Reason, ReasonCode, said

# The reasons a held job waits for.
HELD = frozenset({ReasonCode.HELD_USER, ReasonCode.HELD_ADMIN, ReasonCode.SUSPENDED})


class HoldKind(enum.StrEnum):
    """Whose hold it is: a user's (any who may act on the job releases it) or an admin's
    (only an admin does)."""

    USER = "user"
    ADMIN = "admin"


@dataclasses.dataclass(frozen=True)
class Hold:
    """A job's hold: its kind, who put it, and whether it suspended the job while it ran."""

    kind: HoldKind
    by: str
    suspended: bool = False

    @property
    def reason(self) -> Reason:
        """Why a held job waits (its pending reason)."""
        if self.suspended:
            return said(ReasonCode.SUSPENDED, by=self.by, admin=self.kind is HoldKind.ADMIN)
        code = ReasonCode.HELD_ADMIN if self.kind is HoldKind.ADMIN else ReasonCode.HELD_USER
        return said(code, by=self.by)


def hold_of(kind: str, by: str, suspended: bool) -> Hold | None:
    """A hold as the store keeps it (kind "": none)."""
    return Hold(HoldKind(kind), by, bool(suspended)) if kind else None


def hold_by(principal: Principal | None, owner: str, *, suspended: bool = False) -> Hold:
    """The hold `principal` puts (None: authentication is off, the owner's own hold)."""
    if principal is None:
        return Hold(HoldKind.USER, owner, suspended)
    kind = HoldKind.ADMIN if principal.admin else HoldKind.USER
    return Hold(kind, principal.user, suspended)


def check_may_hold(
    principal: Principal | None, owner: str, groups: tuple[str, ...], verb: str
) -> None:
    """Raise PermissionDenied unless `principal` may `verb` (hold, suspend...) the job."""
    if principal is not None:
        check_may_act_on(principal, owner, groups, verb)


def placed(current: Hold | None, new: Hold, job_id: str, phase: Phase) -> Hold | None:
    """The hold a job gets when `new` is put on it (None: it keeps what it has), or Conflict
    when its phase does not allow it (a hold needs a queued job, a suspension a running one).
    An admin's hold replaces a user's; a user's leaves any hold as it is."""
    wanted = Phase.RUNNING if new.suspended else Phase.QUEUED
    if phase is not wanted:
        verb = "suspended" if new.suspended else "held"
        raise Conflict(f"job {job_id} is {phase}; only a {wanted.lower()} job can be {verb}")
    if current is None:
        return new
    if current.kind is HoldKind.USER and new.kind is HoldKind.ADMIN:
        return dataclasses.replace(new, suspended=current.suspended)
    return None


def check_may_release(
    current: Hold | None, principal: Principal | None, job_id: str, *, resume: bool
) -> None:
    """Raise unless `principal` may release (resume: only a suspended job) the hold."""
    if resume and current is not None and not current.suspended:
        raise Conflict(f"job {job_id} is held, not suspended; release it instead")
    if current is None or current.kind is HoldKind.USER:
        return
    if principal is not None and not principal.admin:
        verb = "resume" if resume else "release"
        raise PermissionDenied(
            f"job {job_id} is held by the admin {current.by}; only an admin may {verb} it"
        )
