"""The transition table of a wsjob's phase."""

from __future__ import annotations

import itertools

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

FORWARD = [Phase.QUEUED, Phase.SCHEDULED, Phase.INITIALIZING, Phase.RUNNING, Phase.SUCCEEDED]


@pytest.mark.parametrize("final", sorted(TERMINAL))
def test_terminal_phases_have_no_outgoing_transition(final: Phase) -> None:
    assert final.terminal
    assert [b for a, b in TRANSITIONS if a is final] == []
    assert not any(can_transition(final, target) for target in Phase)


def test_the_forward_chain_is_allowed_step_by_step_and_never_skips_or_goes_back() -> None:
    for current, following in itertools.pairwise(FORWARD):
        assert can_transition(current, following)
    for i, current in enumerate(FORWARD):
        for j, target in enumerate(FORWARD):
            if j != i + 1:
                assert not can_transition(current, target), (current, target)


@pytest.mark.parametrize("phase", sorted(ACTIVE))
def test_every_active_phase_can_fail_or_be_cancelled(phase: Phase) -> None:
    assert not phase.terminal
    assert can_transition(phase, Phase.FAILED)
    assert can_transition(phase, Phase.CANCELLED)


def test_the_table_is_exactly_forward_plus_fail_and_cancel() -> None:
    forward = set(itertools.pairwise(FORWARD))
    stops = {(p, t) for p in ACTIVE for t in (Phase.FAILED, Phase.CANCELLED)}
    assert forward | stops == TRANSITIONS
    assert all(a is not b for a, b in TRANSITIONS)


def test_phase_sets_partition_and_resources_are_held_only_between_queue_and_end() -> None:
    assert set(Phase) == ACTIVE | TERMINAL
    assert not ACTIVE & TERMINAL
    assert {Phase.SCHEDULED, Phase.INITIALIZING, Phase.RUNNING} == HOLDS_RESOURCES


@pytest.mark.parametrize("current", list(Phase), ids=str)
def test_check_move_decides_on_the_expected_phase_then_the_table(current: Phase) -> None:
    for target in Phase:
        table = Outcome.APPLIED if can_transition(current, target) else Outcome.INVALID
        same = Outcome.ALREADY if current is target else table
        assert check_move(current, target) is same
        assert check_move(current, target, expected=current) is same
        for expected in (p for p in Phase if p is not current):
            moved_on = Outcome.ALREADY if current is target else Outcome.LOST
            assert check_move(current, target, expected) is moved_on, (expected, target)
