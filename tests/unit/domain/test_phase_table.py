"""The transition table of a wsjob's phase, against the table the design documents, written out
here entry by entry (the module derives its sets; these tests do not reuse the derivation)."""

from __future__ import annotations

import pytest

from appliance.domain.phases import (
    ACTIVE,
    HOLDS_RESOURCES,
    TERMINAL,
    TRANSITIONS,
    Outcome,
    Phase,
    can_transition,
    check_move,
)

Q, S, INIT, R = Phase.QUEUED, Phase.SCHEDULED, Phase.INITIALIZING, Phase.RUNNING
OK, FAIL, CANCEL, TIMEOUT = Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED, Phase.TIMEOUT

DOCUMENTED = {
    (Q, S), (S, INIT), (INIT, R), (R, OK),  # forward, one step at a time
    (S, Q), (INIT, Q), (R, Q),  # requeued: resources given back, another attempt later
    (Q, FAIL), (S, FAIL), (INIT, FAIL), (R, FAIL),
    (Q, CANCEL), (S, CANCEL), (INIT, CANCEL), (R, CANCEL),
    (S, TIMEOUT), (INIT, TIMEOUT), (R, TIMEOUT),  # its time limit reached, holding resources
}  # fmt: skip


def test_the_table_is_exactly_the_documented_one() -> None:
    assert TRANSITIONS == DOCUMENTED


@pytest.mark.parametrize("current", list(Phase), ids=str)
def test_can_transition_answers_from_the_table(current: Phase) -> None:
    allowed = {target for target in Phase if can_transition(current, target)}
    assert allowed == {b for a, b in DOCUMENTED if a is current}


def test_the_phase_sets_are_the_documented_ones() -> None:
    assert {OK, FAIL, CANCEL, TIMEOUT} == TERMINAL
    assert {Q, S, INIT, R} == ACTIVE
    assert {S, INIT, R} == HOLDS_RESOURCES  # reserved from scheduling until the job ends
    assert [p for p in Phase if p.terminal] == [OK, FAIL, CANCEL, TIMEOUT]


@pytest.mark.parametrize(
    ("current", "target", "expected", "outcome"),
    [
        (R, OK, None, Outcome.APPLIED),
        (Q, S, Q, Outcome.APPLIED),  # compare-and-set on the phase the caller decided on
        (R, R, None, Outcome.ALREADY),
        (CANCEL, CANCEL, R, Outcome.ALREADY),  # someone else got there first: not an error
        (INIT, R, S, Outcome.LOST),  # the job moved on since the caller looked
        (OK, CANCEL, R, Outcome.LOST),
        (OK, FAIL, None, Outcome.INVALID),  # terminal phases never change
        (Q, INIT, None, Outcome.INVALID),  # no skipping
        (R, INIT, None, Outcome.INVALID),  # no going back but to the queue
        (S, Q, S, Outcome.APPLIED),  # requeued
        (OK, Q, None, Outcome.INVALID),  # a finished job is never requeued
    ],
)
def test_check_move_outcomes(
    current: Phase, target: Phase, expected: Phase | None, outcome: Outcome
) -> None:
    assert check_move(current, target, expected) is outcome
