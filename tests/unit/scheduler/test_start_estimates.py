"""Estimated starts of queued jobs: the pure model, with known and unknown run times."""

from __future__ import annotations

from appliance.scheduler.start_estimates import Holder, Waiting, Window, estimate_starts

NOW = 1000.0


def test_a_job_starts_when_enough_running_jobs_have_ended() -> None:
    holders = [Holder(2, NOW + 20), Holder(2, NOW + 10)]
    waiting = [Waiting("big", 3, 5.0), Waiting("small", 1, 30.0), Waiting("later", 4, 1.0)]

    found = estimate_starts(NOW, 4, holders, waiting)

    # big needs 3: only when both ended; small backfills at +10 without delaying big (free 2
    # from +10, 1 left beside big at +20); later needs all 4: after big (+25) and small (+40).
    assert found == {"big": NOW + 20, "small": NOW + 10, "later": NOW + 40}


def test_free_systems_start_a_job_now() -> None:
    assert estimate_starts(NOW, 4, [Holder(1, None)], [Waiting("a", 3, None)]) == {"a": NOW}


def test_unknown_ends_and_run_times_leave_jobs_without_an_estimate() -> None:
    holders = [Holder(2, None), Holder(2, NOW + 10)]
    waiting = [
        Waiting("three", 3, 5.0),  # the 2 systems of unknown end never come back
        Waiting("two", 2, None),  # gets the other 2 at +10 and keeps them
        Waiting("one", 1, 1.0),  # nothing is ever free again
        Waiting("too-big", 5, 1.0),  # more than is usable
    ]

    assert estimate_starts(NOW, 4, holders, waiting) == {"two": NOW + 10}


def test_a_job_ending_in_the_past_gives_its_systems_back_now() -> None:
    assert estimate_starts(NOW, 2, [Holder(2, NOW - 5)], [Waiting("a", 2, 1.0)]) == {"a": NOW}


def test_a_reservations_window_is_busy_for_the_jobs_it_is_not_for() -> None:
    window = Window("fans", 100.0, 200.0, 2)  # 2 of 4 systems from 100 to 200
    waiting = [
        Waiting("kept", 3, 150.0, frozenset({"fans"})),  # 3 for 150 s: not before 200
        Waiting("short", 2, 50.0, frozenset({"fans"})),  # ends by 100 on what is free
        Waiting("its-own", 1, 300.0),  # the window is for it
    ]
    found = estimate_starts(0.0, 4, [], waiting, [window])
    assert found == {"kept": 200.0, "short": 0.0, "its-own": 0.0}
    assert estimate_starts(0.0, 4, [], waiting[:1]) == {"kept": 0.0}
