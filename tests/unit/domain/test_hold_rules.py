"""The rules of holds (domain/holds.py), pure: the hold a caller puts, what a second hold
does, who may release, and the reasons a held job gives."""

from __future__ import annotations

import pytest

from appliance.domain.auth import Principal
from appliance.domain.errors import Conflict, PermissionDenied
from appliance.domain.holds import (
    Hold,
    HoldKind,
    check_may_hold,
    check_may_release,
    hold_by,
    hold_of,
    placed,
)
from appliance.domain.phases import Phase
from appliance.domain.reasons import ReasonCode

JOB = "wsjob-holds0000000000"
USERS = Hold(HoldKind.USER, "alice")
ADMINS = Hold(HoldKind.ADMIN, "root")


def test_the_hold_a_caller_puts_is_an_admins_only_when_an_admin_puts_it() -> None:
    assert hold_by(Principal("alice"), "alice") == USERS
    assert hold_by(Principal("root", admin=True), "alice") == ADMINS
    assert hold_by(None, "alice") == USERS  # authentication off: the owner's own hold
    assert hold_by(None, "alice", suspended=True).suspended


def test_a_second_hold_upgrades_a_users_to_an_admins_and_changes_nothing_else() -> None:
    assert placed(None, USERS, JOB, Phase.QUEUED) == USERS
    assert placed(USERS, ADMINS, JOB, Phase.QUEUED) == ADMINS
    assert placed(ADMINS, USERS, JOB, Phase.QUEUED) is None
    assert placed(USERS, USERS, JOB, Phase.QUEUED) is None
    suspension = Hold(HoldKind.USER, "alice", suspended=True)
    assert placed(None, suspension, JOB, Phase.RUNNING) == suspension


@pytest.mark.parametrize("phase", [p for p in Phase if p is not Phase.QUEUED])
def test_only_a_queued_job_is_held_and_the_refusal_names_the_phase(phase: Phase) -> None:
    with pytest.raises(Conflict, match=f"job {JOB} is {phase}; only a queued job can be held"):
        placed(None, USERS, JOB, phase)


def test_only_a_running_job_is_suspended() -> None:
    suspension = Hold(HoldKind.USER, "alice", suspended=True)
    with pytest.raises(Conflict, match="is QUEUED; only a running job can be suspended"):
        placed(None, suspension, JOB, Phase.QUEUED)


def test_an_admins_hold_is_released_by_an_admin_only() -> None:
    check_may_release(USERS, Principal("alice"), JOB, resume=False)
    check_may_release(ADMINS, Principal("root", admin=True), JOB, resume=False)
    check_may_release(ADMINS, None, JOB, resume=False)  # authentication off: an admin
    check_may_release(None, Principal("alice"), JOB, resume=False)  # nothing to release
    with pytest.raises(PermissionDenied, match="held by the admin root; only an admin may"):
        check_may_release(ADMINS, Principal("alice"), JOB, resume=False)
    with pytest.raises(Conflict, match="held, not suspended; release it instead"):
        check_may_release(USERS, Principal("alice"), JOB, resume=True)


def test_who_may_hold_is_who_may_act_on_the_job() -> None:
    check_may_hold(Principal("alice"), "alice", (), "hold")
    check_may_hold(Principal("carol", ("nlp",)), "alice", ("nlp",), "hold")
    check_may_hold(None, "alice", (), "hold")
    with pytest.raises(PermissionDenied, match="bob may not hold a job of alice"):
        check_may_hold(Principal("bob"), "alice", (), "hold")


def test_a_held_job_says_whose_hold_it_waits_for() -> None:
    assert USERS.reason.code is ReasonCode.HELD_USER
    assert USERS.reason.message.startswith("held by alice")
    assert ADMINS.reason.code is ReasonCode.HELD_ADMIN
    assert Hold(HoldKind.ADMIN, "root", suspended=True).reason.code is ReasonCode.SUSPENDED
    assert hold_of("", "", False) is None
    assert hold_of("admin", "root", True) == Hold(HoldKind.ADMIN, "root", suspended=True)


def test_an_admins_suspension_says_an_admin_resumes_it() -> None:
    """The user is not told to `csctl resume job` what only an admin may resume."""
    admins = Hold(HoldKind.ADMIN, "root", suspended=True).reason
    users = Hold(HoldKind.USER, "alice", suspended=True).reason
    assert admins.code is users.code is ReasonCode.SUSPENDED
    assert "an admin resumes it" in admins.message and "csctl resume job" not in admins.message
    assert "csctl resume job" in users.message
