"""A params text is parsed and checked once among the last kept ones; each caller still gets
a mapping of its own, and a refusal is never kept."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from appliance.domain import params_check
from appliance.domain.errors import InvalidSpec
from appliance.domain.params_check import PARAMS_KEPT_CHARS, checked_params

TEXT = "model:\n  name: fc_mnist\n  hidden_size: 64\noptimizer:\n  learning_rate: 0.01\n"


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The texts really parsed, from a cache emptied for the test."""
    seen: list[str] = []
    real = params_check.load_bounded

    def counted(text: str, field: str) -> Any:
        seen.append(text)
        return real(text, field)

    monkeypatch.setattr(params_check, "load_bounded", counted)
    params_check._kept_params.cache_clear()
    yield seen
    params_check._kept_params.cache_clear()


def test_the_same_text_is_parsed_once_and_each_caller_gets_its_own_mapping(
    parses: list[str],
) -> None:
    first, typed = checked_params(TEXT)
    first["model"]["hidden_size"] = 999  # a caller changing its copy
    second, typed_again = checked_params(TEXT)
    assert parses == [TEXT]
    assert second["model"]["hidden_size"] == 64
    assert typed is not None and typed_again is typed


def test_a_refused_text_is_checked_again_every_time(parses: list[str]) -> None:
    bad = "model:\n  name: fc_mnist\nnot_a_section: {}\n"
    for _ in range(2):
        with pytest.raises(InvalidSpec, match="unknown section"):
            checked_params(bad)
    assert parses == [bad, bad]


def test_a_long_text_is_not_kept(parses: list[str]) -> None:
    long = TEXT + "# " + "x" * PARAMS_KEPT_CHARS + "\n"
    assert checked_params(long)[0] == checked_params(long)[0]
    assert parses == [long, long]
