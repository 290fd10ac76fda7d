"""Estimated starts of queued jobs: the pure model, with known and unknown run times."""

from __future__ import annotations

from appliance.scheduler.start_estimates import Holder, Waiting, estimate_starts

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
