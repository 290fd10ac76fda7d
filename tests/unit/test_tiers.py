"""Every test file sits in a tier's directory, so `make test-unit` (pytest -m unit) and the
tier budgets of tests/timing.py leave none out."""

from __future__ import annotations

from tests import timing


def test_every_test_file_is_in_a_tier() -> None:
    files = sorted(timing.TESTS.rglob("test_*.py"))
    assert len(files) > 100
    outside = [str(f.relative_to(timing.TESTS)) for f in files if timing.tier_of(f) is None]
    assert outside == []
