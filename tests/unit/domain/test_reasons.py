"""Reason codes: every producer says its reason as a code and parameters, the message is
rendered in one place, and a filter's codes are parsed in any case."""

from __future__ import annotations

import pytest

from appliance.domain.auth import Principal
from appliance.domain.dependencies import Condition, DependencyState, verdicts
from appliance.domain.errors import InvalidSpec
from appliance.domain.phases import Phase
from appliance.domain.reasons import (
    Reason,
    ReasonCode,
    code_of,
    parse_codes,
    said,
    untagged,
)
from appliance.domain.restarts import restart_or_fail, restate_resume_point
from appliance.services.cancels import CancelRequest, cancel_reason


def test_every_code_is_camel_case_and_renders_a_message() -> None:
    for code in ReasonCode:
        assert code.value[0].isupper() and "_" not in code.value
        assert code_of(code.value) is code
    assert code_of("") is None and code_of("SomethingNewer") is None


def test_dependencies_wait_with_dependency_and_cancel_with_dependency_failed() -> None:
    waiting, broken = verdicts(
        [
            DependencyState("wsjob-b", "wsjob-a", Condition.AFTEROK, Phase.RUNNING),
            DependencyState("wsjob-c", "wsjob-a2", Condition.AFTEROK, Phase.FAILED),
        ]
    )
    assert waiting["wsjob-b"].code is ReasonCode.DEPENDENCY
    assert waiting["wsjob-b"].message == "waiting for wsjob-a (RUNNING) to succeed"
    assert broken["wsjob-c"].code is ReasonCode.DEPENDENCY_FAILED
    assert broken["wsjob-c"].message == (
        "dependency wsjob-a2 is FAILED and this job was to run only after it succeeded"
    )


def test_a_restart_is_restarting_and_restating_it_renders_again_without_editing_text() -> None:
    failure = said(ReasonCode.REPLICA_FAILED, replica="cs2-0", exit_code=137)
    requeue, failed = restart_or_fail(failure, 2, 0, 100)
    assert failed is None and requeue is not None
    assert requeue.code is ReasonCode.RESTARTING
    assert requeue.message == (
        "replica cs2-0 exited with exit code 137; restarting from step 100 (restart 1 of 2)"
    )
    later = restate_resume_point(requeue, 100, 200).but(position=3)
    assert later.code is ReasonCode.RESTARTING
    assert later.message == (
        "replica cs2-0 exited with exit code 137; restarting from step 200 (restart 1 of 2); "
        "requeued at position 3"
    )
    assert restate_resume_point(requeue, 100, 50) is requeue  # an older one: as it was


def test_no_restart_left_fails_with_the_code_of_the_cause() -> None:
    cause = said(ReasonCode.NODE_ERROR, kind="system", node="cs2-01", state="error", why="fan")
    requeue, failed = restart_or_fail(cause, 1, 1, 0)
    assert requeue is None and failed is not None
    assert failed.code is ReasonCode.NODE_ERROR
    assert failed.message == "system cs2-01 went to error: fan (no restarts left: 1 of 1 used)"


@pytest.mark.parametrize(
    ("by", "code", "message"),
    [
        (None, ReasonCode.CANCELLED_BY_USER, "cancelled by user"),
        (Principal("alice"), ReasonCode.CANCELLED_BY_USER, "cancelled by alice"),
        (Principal("bob", ("ml",)), ReasonCode.CANCELLED_BY_USER, "cancelled by bob"),
        (Principal("root", admin=True), ReasonCode.CANCELLED_BY_ADMIN, "cancelled by root"),
        (Principal("alice", admin=True), ReasonCode.CANCELLED_BY_USER, "cancelled by alice"),
    ],
)
def test_a_cancel_is_by_the_user_unless_an_admin_cancels_someone_elses_job(
    by: Principal | None, code: ReasonCode, message: str
) -> None:
    reason = cancel_reason(CancelRequest("wsjob-a", "", by), owner="alice")
    assert (reason.code, reason.message) == (code, message)
    given = cancel_reason(CancelRequest("wsjob-a", "not needed", by), owner="alice")
    assert (given.code, given.message) == (code, "not needed")


def test_a_reason_read_back_keeps_its_code_and_message_and_takes_notes() -> None:
    stored = Reason.stored_as("Preempted", "preempted by wsjob-b (P1)")
    assert stored.code is ReasonCode.PREEMPTED
    assert stored.but(checkpointed=40, position=2).message == (
        "preempted by wsjob-b (P1); checkpointed at step 40; requeued at position 2"
    )
    assert Reason.stored_as("", "old text").code is None
    assert untagged("old text").code_text == ""


def test_filter_codes_in_any_case_and_comma_lists() -> None:
    assert parse_codes(["capacity", "BEHIND_HIGHER_PRIORITY, quota"]) == {
        ReasonCode.CAPACITY, ReasonCode.BEHIND_HIGHER_PRIORITY, ReasonCode.QUOTA,
    }  # fmt: skip
    assert parse_codes([]) == frozenset()  # no filter


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ([""], "an empty reason code; give one or more of: Scheduler, Capacity,"),
        ([",,,"], "an empty reason code"),
        (["Capacity,,Quota"], "an empty reason code"),
        (["Capacity", " "], "an empty reason code"),
        ([",".join(["Capacity"] * 65)], "at most 64 reason codes in one filter"),
        (["Capacity"] * 65, "at most 64 reason codes in one filter"),
    ],
)
def test_a_filter_that_would_match_by_mistake_is_refused(values: list[str], says: str) -> None:
    with pytest.raises(InvalidSpec) as refused:
        parse_codes(values)
    assert refused.value.field == "reason"
    assert says in str(refused.value)


def test_filter_codes_refuse_unknown_ones() -> None:
    with pytest.raises(InvalidSpec) as refused:
        parse_codes(["Capacity", "Sleepy"])
    assert refused.value.field == "reason"
    assert "unknown reason code 'Sleepy'; valid codes: Scheduler, Capacity," in str(refused.value)
