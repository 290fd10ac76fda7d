"""Label selectors as kubectl writes them: what they match, and one-line refusals."""

from __future__ import annotations

import pytest

from appliance.domain.errors import InvalidSpec
from appliance.domain.selectors import (
    MAX_REQUIREMENTS,
    MAX_SELECTOR_CHARS,
    MAX_VALUES,
    parse_selector,
    parse_selectors,
)

JOBS = {
    "nlp": {"team": "nlp"},
    "cv-tmp": {"team": "cv", "tmp": "1"},
    "owner": {"owner": "x"},
    "bare": {},
}


@pytest.mark.parametrize(
    ("text", "expected", "canonical"),
    [
        ("", {"nlp", "cv-tmp", "owner", "bare"}, ""),
        ("team=nlp", {"nlp"}, "team=nlp"),
        (" team == nlp ", {"nlp"}, "team=nlp"),
        ("team!=nlp", {"cv-tmp", "owner", "bare"}, "team!=nlp"),
        ("team in (nlp, cv)", {"nlp", "cv-tmp"}, "team in (nlp,cv)"),
        ("team notin (nlp)", {"cv-tmp", "owner", "bare"}, "team notin (nlp)"),
        ("tmp", {"cv-tmp"}, "tmp"),
        ("!team", {"owner", "bare"}, "!team"),
        ("team,!tmp", {"nlp"}, "team,!tmp"),
        ("owner=", set(), "owner="),
    ],
)
def test_what_a_selector_matches(text: str, expected: set[str], canonical: str) -> None:
    selector = parse_selector(text)

    assert {name for name, labels in JOBS.items() if selector.matches(labels)} == expected
    assert str(selector) == canonical
    assert parse_selector(str(selector)) == selector  # what a client sends parses back


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a b", "after key 'a' expected =, ==, !=, in, notin, ',' or the end, found 'b' at "
         "character 3"),
        ("a=b,", "expected a requirement after the last ',', found the end at character 5"),
        ("a in (x", "expected ',' or ')' in the values, found the end at character 8"),
        ("a in ()", "the values of 'a' must not be empty"),
        ("a in (x,,y)", "expected a value of 'a', found ',' at character 9"),
        ("a notin (,x)", "expected a value of 'a', found ',' at character 10"),
        ("a in (x,)", "expected a value of 'a', found ')' at character 9"),
        ("a in x", "expected '(' opening the values, found 'x' at character 6"),
        ("a%b", "unexpected character '%' at character 2"),
        ("!", "expected a label key, found the end at character 2"),
        ("a>1", "unexpected character '>' at character 2"),
        ("-a=b", "label key '-a' must be"),
        ("a=" + "x" * 64, "label value 'xxx"),
    ],
)  # fmt: skip
def test_a_bad_selector_is_one_line_naming_the_field(text: str, message: str) -> None:
    with pytest.raises(InvalidSpec) as raised:
        parse_selector(text, field="label")

    assert raised.value.field == "label"
    assert message in raised.value.message
    assert "\n" not in raised.value.message


def test_selectors_are_bounded() -> None:
    with pytest.raises(InvalidSpec, match=f"at most {MAX_SELECTOR_CHARS} characters"):
        parse_selector("a" * (MAX_SELECTOR_CHARS + 1))
    with pytest.raises(InvalidSpec, match=f"at most {MAX_REQUIREMENTS} requirements"):
        parse_selector(",".join(f"k{n}" for n in range(MAX_REQUIREMENTS + 1)))
    with pytest.raises(InvalidSpec, match=f"at most {MAX_REQUIREMENTS} requirements"):
        parse_selectors(["k1,k2"] * (MAX_REQUIREMENTS // 2 + 1))
    with pytest.raises(InvalidSpec, match=f"must be at most {MAX_VALUES}"):
        parse_selector(f"k in ({','.join(str(n) for n in range(MAX_VALUES + 1))})")
    long = parse_selector("x" * 10 + "=" + "y")
    assert str(long) == "xxxxxxxxxx=y"
