"""Ages, labels and tables as csctl prints them."""

from __future__ import annotations

import pytest

from csctl.render import format_age, format_labels, format_table


@pytest.mark.parametrize(
    ("seconds", "age"),
    [(-5, "0s"), (0, "0s"), (42, "42s"), (119, "119s"), (120, "2m"), (150, "2m30s"),
     (299, "4m59s"), (600, "10m"), (3600, "60m"), (3 * 3600, "3h"), (5 * 3600 + 180, "5h3m"),
     (18 * 3600 + 59, "18h"), (2 * 86400 + 3 * 3600, "2d3h"), (86400 * 3 + 7, "3d"),
     (86400 * 9, "9d"), (86400 * 800, "2y70d"), (86400 * 365 * 9, "9y")],
)  # fmt: skip
def test_format_age_as_kubectl(seconds: float, age: str) -> None:
    assert format_age(seconds) == age


def test_labels_are_sorted_key_value_pairs() -> None:
    assert format_labels({"team": "nlp", "model": "gpt3"}.items()) == "model=gpt3,team=nlp"


def test_table_columns_line_up() -> None:
    table = format_table(("NAME", "AGE"), [["wsjob-a", "5m"], ["x", ""]])

    assert table.splitlines() == ["NAME      AGE", "wsjob-a   5m", "x"]
