"""The usage window asked for (domain/usage.py): its defaults, and each bad input refused with
InvalidSpec naming its field."""

from __future__ import annotations

import math

import pytest

from appliance.domain.errors import InvalidSpec
from appliance.domain.usage import (
    DEFAULT_WINDOW_SECONDS,
    MAX_WINDOW_SECONDS,
    UsageBy,
    UsageQuery,
    usage_query,
)

NOW = 1_700_000_000.0


def test_until_defaults_to_now_since_to_thirty_days_before_and_by_to_user() -> None:
    assert usage_query(0, 0, "", NOW) == UsageQuery(NOW - DEFAULT_WINDOW_SECONDS, NOW)
    assert usage_query(0, NOW - 100, "queue", NOW) == UsageQuery(
        NOW - 100 - DEFAULT_WINDOW_SECONDS, NOW - 100, UsageBy.QUEUE
    )
    assert usage_query(NOW - 10, 0, "group", NOW) == UsageQuery(NOW - 10, NOW, UsageBy.GROUP)
    # A window that ends in the future is allowed (holds count up to now).
    assert usage_query(NOW - 10, NOW + 10, "user", NOW).until == NOW + 10


@pytest.mark.parametrize(
    ("since", "until", "by", "field"),
    [
        (NOW, NOW - 1, "user", "since"),  # since after until
        (NOW, NOW, "user", "since"),  # an empty window
        (-1.0, NOW, "user", "since"),
        (NOW - 10, -5.0, "user", "until"),
        (math.nan, NOW, "user", "since"),
        (NOW - 10, math.nan, "user", "until"),
        (math.inf, NOW, "user", "since"),
        (NOW - 10, 1e12, "user", "until"),  # not a Unix time
        ("yesterday", NOW, "user", "since"),
        (1.0, NOW, "user", "since"),  # longer than ten years
        (NOW - 10, NOW, "account", "by"),
        (NOW - 10, NOW, "USER", "by"),
    ],
)
def test_a_bad_window_or_by_is_refused_naming_its_field(
    since: float, until: float, by: str, field: str
) -> None:
    with pytest.raises(InvalidSpec) as caught:
        usage_query(since, until, by, NOW)
    assert caught.value.field == field, caught.value


def test_the_longest_window_is_ten_years() -> None:
    assert usage_query(NOW - MAX_WINDOW_SECONDS, NOW, "user", NOW).since == (
        NOW - MAX_WINDOW_SECONDS
    )
