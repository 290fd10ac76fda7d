"""Cancelling many jobs in one call (`csctl cancel jobs`, the counterpart of `scancel -u`): which
jobs a request selects, the bounds of one call, and what it answers.

A request names jobs either by id or by a selection, never both (as kubectl refuses names
together with a selector). A selection is the one a listing offers (a user, or the caller's
own jobs; every label; only some active phases) over the active jobs. It must say whose jobs
or which ones: a user, `mine`, labels or ids; phases only narrow it. Every user's jobs take
`all`, which is for admins (and for everyone while authentication is off, when every caller is
an admin). Each selected job is then cancelled exactly as a single cancel would be, with the
same rule of who may (domain/auth.py); a job the caller may not cancel is left as it is and
counted as refused, not a failure of the others.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from appliance.domain.auth import Principal
from appliance.domain.errors import InvalidSpec, PermissionDenied
from appliance.domain.ids import is_job_id
from appliance.domain.phases import ACTIVE, Phase
from appliance.domain.selectors import LabelSelector
from appliance.domain.spec import (
    MAX_LABELS,
    MAX_REASON,
    validate_labels,
    validate_text,
    validate_user,
)

MAX_IDS = 10_000  # job ids one request may name
MAX_PER_CALL = 20_000  # jobs one call considers; past it, it answers a next_page_token
MAX_PAGE_TOKEN = 512
MAX_LISTED = 1_000  # ids of each kind an answer carries (the counts are complete)
_MAX_LABEL_KEY = 253 + 1 + 63  # prefix/name
_MAX_LABEL_VALUE = 63
ACTIVE_NAMES = ", ".join(p.value for p in Phase if p in ACTIVE)


@dataclasses.dataclass(frozen=True)
class CancelSelection:
    """What a bulk cancel asks for, as a door received it (checked by `checked_selection`)."""

    user: str = ""
    mine: bool = False  # the caller's jobs: its token's user (authentication off: `user`)
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    phases: frozenset[Phase] = frozenset()  # empty: every active phase
    job_ids: tuple[str, ...] = ()
    all: bool = False  # every user's jobs (admins)
    reason: str = ""
    page_token: str = ""  # where the previous call stopped
    selector: LabelSelector = dataclasses.field(default_factory=LabelSelector)  # with labels


@dataclasses.dataclass(frozen=True)
class BulkCancelResult:
    """What a bulk cancel did. The counts are complete; each list holds the first MAX_LISTED
    ids of its kind. `next_page_token` is set when the call stopped at MAX_PER_CALL jobs:
    the same request with it as `page_token` goes on from there."""

    cancelled: int = 0
    finished: int = 0  # already ended (named by id, or ended meanwhile): left as they were
    refused: int = 0  # the caller may not cancel them: left as they were
    not_found: int = 0  # ids that name no job
    cancelled_ids: tuple[str, ...] = ()
    refused_ids: tuple[str, ...] = ()
    not_found_ids: tuple[str, ...] = ()
    message: str = ""
    next_page_token: str = ""
    refusal: str = ""  # why the first refused job was refused

    def merged(self, later: BulkCancelResult) -> BulkCancelResult:
        """This call's result followed by the next page's (the client adds them up)."""
        return BulkCancelResult(
            cancelled=self.cancelled + later.cancelled,
            finished=self.finished + later.finished,
            refused=self.refused + later.refused,
            not_found=self.not_found + later.not_found,
            cancelled_ids=_first(self.cancelled_ids + later.cancelled_ids),
            refused_ids=_first(self.refused_ids + later.refused_ids),
            not_found_ids=_first(self.not_found_ids + later.not_found_ids),
            message=later.message if later.message else self.message,
            next_page_token=later.next_page_token,
            refusal=self.refusal or later.refusal,
        )


def checked_selection(selection: CancelSelection, by: Principal | None) -> CancelSelection:
    """The selection with `mine` resolved to a user and its ids deduplicated, or InvalidSpec /
    PermissionDenied naming the field at fault. `by`: the caller (None: authentication off)."""
    s = selection
    reason = validate_text(s.reason, "reason", MAX_REASON)
    if len(s.page_token) > MAX_PAGE_TOKEN:
        raise InvalidSpec("page_token is not one this server issued", field="page_token")
    selects = bool(s.user or s.mine or s.labels or s.selector or s.phases or s.all)
    if s.job_ids:
        if selects:
            raise InvalidSpec(
                "name jobs either by id or by a selection (user, mine, labels, phases, all), "
                "not both",
                field="job_ids",
            )
        return dataclasses.replace(s, job_ids=_checked_ids(s.job_ids), reason=reason)
    user = by.user if s.mine and by is not None else s.user
    if s.mine and not user:
        raise InvalidSpec(
            "mine needs the caller's user name: with authentication off, give it as user",
            field="user",
        )
    if user:
        validate_user(user)
    labels = _checked_labels(s.labels)
    for phase in s.phases:
        if phase not in ACTIVE:
            raise InvalidSpec(
                f"phase {phase.value} is a finished phase, nothing to cancel; phases are "
                f"{ACTIVE_NAMES}",
                field="phases",
            )
    if s.all and user:
        raise InvalidSpec(
            "all selects every user's jobs; leave out user and mine, or all", field="all"
        )
    if not (user or labels or s.selector.narrows or s.all):
        raise InvalidSpec(
            "say whose jobs to cancel: user, mine, labels (or a label selector with k=v, "
            "'k in (...)' or k; k!=v, notin and !k only narrow) or job ids (phases only narrow "
            "a selection), or all for every user's jobs",
            field="all",
        )
    if s.all and by is not None and not by.admin:
        raise PermissionDenied(
            f"{by.user} may not cancel every user's jobs (all is for admins); use mine",
            field="all",
        )
    return dataclasses.replace(s, user=user, mine=False, labels=labels, reason=reason)


def parse_phases(names: Iterable[str | Phase]) -> frozenset[Phase]:
    """Phases by name, any case ("queued", "RUNNING"); InvalidSpec naming `phases` for a name
    that is no phase."""
    found: set[Phase] = set()
    for name in names:
        try:
            found.add(Phase(name.upper()))
        except ValueError:
            raise InvalidSpec(
                f"{name[:40]!r} is not a phase; phases are {ACTIVE_NAMES}", field="phases"
            ) from None
    return frozenset(found)


def _checked_ids(job_ids: Iterable[str]) -> tuple[str, ...]:
    unique = tuple(dict.fromkeys(job_ids))
    if len(unique) > MAX_IDS:
        raise InvalidSpec(
            f"at most {MAX_IDS} job ids a call; select by user or labels instead",
            field="job_ids",
        )
    for job_id in unique:
        if not is_job_id(job_id):
            raise InvalidSpec(
                f"{job_id[:80]!r} is not a job id; job ids look like wsjob-0a1b2c3d4e5f6g",
                field="job_ids",
            )
    return unique


def _checked_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """validate_labels, with overlong keys and values refused first without quoting them (an
    error line stays one short line, whatever was sent)."""
    if len(labels) <= MAX_LABELS:
        for key, value in labels.items():
            if len(key) > _MAX_LABEL_KEY or len(value) > _MAX_LABEL_VALUE:
                raise InvalidSpec(
                    f"label {key[:40]!r}...: a key is at most {_MAX_LABEL_KEY} characters, a "
                    f"value at most {_MAX_LABEL_VALUE}",
                    field="labels",
                )
    return validate_labels(labels)


def _first(ids: tuple[str, ...]) -> tuple[str, ...]:
    return ids[:MAX_LISTED]
