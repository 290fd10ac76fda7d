from __future__ import annotations

from appliance.domain.weight_schedule import forward_order, occurrences, training_order


def test_a_training_step_streams_every_unit_forward_then_again_in_reverse() -> None:
    assert training_order(3, ()) == [0, 1, 2, 2, 1, 0]


def test_a_tied_head_unit_is_streamed_again_between_the_two_passes() -> None:
    assert forward_order(4, (0,)) == [0, 1, 2, 3, 0]
    assert training_order(4, (0,)) == [0, 1, 2, 3, 0, 3, 2, 1, 0]
    assert forward_order(2, (1,)) == [0, 1]  # the last unit is the one just computed on


def test_occurrences_tell_a_units_broadcasts_apart() -> None:
    assert occurrences([0, 1, 1, 0, 0]) == [(0, 0), (1, 0), (1, 1), (0, 1), (0, 2)]
