"""The web door's checks of what a page or a form gives, and its age format."""

from __future__ import annotations

import pytest

from appliance.domain.errors import InvalidSpec
from appliance.server.web.fields import labels, one_of
from appliance.server.web.render import age


def test_labels_are_parsed_and_refusals_name_the_field() -> None:
    assert labels("team=nlp, exp=3", "label") == {"team": "nlp", "exp": "3"}
    assert labels("", "label") == {}
    for bad in ("team", "bad key=1", "k=" + "v" * 500):
        with pytest.raises(InvalidSpec) as refused:
            labels(bad, "set")
        assert refused.value.field == "set"


def test_one_of_names_the_choices() -> None:
    assert one_of("P1", ["P0", "P1"], "priority") == "P1"
    with pytest.raises(InvalidSpec, match="priority must be one of P0, P1") as refused:
        one_of("<script>", ["P0", "P1"], "priority")
    assert refused.value.field == "priority"


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0s"), (59, "59s"), (119, "1m59s"), (3600, "1h0m"), (7322, "2h2m"), (90061, "1d1h")],
)
def test_age_reads_like_kubectl(seconds: int, shown: str) -> None:
    assert age(1000.0, 1000.0 + seconds) == shown
    assert age(0.0, 5.0) == "-"
