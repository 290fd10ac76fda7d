"""Ages, labels and tables as csctl prints them."""

from __future__ import annotations

import pytest

from csctl.render import format_age, format_labels, format_table


@pytest.mark.parametrize(
    ("seconds", "age"),
    [(-5, "0s"), (0, "0s"), (42, "42s"), (60, "1m"), (299, "4m"), (3600, "1h"),
     (18 * 3600 + 59, "18h"), (86400 * 3 + 7, "3d")],
)  # fmt: skip
def test_format_age(seconds: float, age: str) -> None:
    assert format_age(seconds) == age


def test_labels_are_sorted_key_value_pairs() -> None:
    assert format_labels({"team": "nlp", "model": "gpt3"}.items()) == "model=gpt3,team=nlp"


def test_table_columns_line_up() -> None:
    table = format_table(("NAME", "AGE"), [["wsjob-a", "5m"], ["x", ""]])

    assert table.splitlines() == ["NAME      AGE", "wsjob-a   5m", "x"]
