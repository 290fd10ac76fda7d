"""How long a test may take and wait: one place for every time bound of the suite.

Each test's timeout (pytest-timeout, fixtures it sets up included) is the budget of its tier,
the top directory it lives in: unit tests run no server and get seconds; tests that start real
replicas, pods or a whole node get minutes, enough for a busy 2-core machine (CI shares one).
A test may ask for more with `@pytest.mark.timeout(N)`, never less than the waits inside it:
tests/unit/test_time_budgets.py reads every test and fails when the waits it writes
(`timeout=`, `within=`, and the bound of `wait_until`/`wait_for`) add up to more than its
budget, so no test can wait 300 s inside a 120 s timeout.

APPLIANCE_TEST_SLOWDOWN=N (default 1) stretches every budget and the waits of the shared
helpers (harness.wait_until, kube.node.wait_for, the browser tests' waits) N times: for a
machine much slower or busier than a loaded 2-core one.
"""

from __future__ import annotations

import os
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _slowdown() -> float:
    text = os.environ.get("APPLIANCE_TEST_SLOWDOWN", "1")
    try:
        value = float(text)
    except ValueError:
        raise SystemExit(f"APPLIANCE_TEST_SLOWDOWN must be a number, got {text!r}") from None
    if not 1 <= value <= 100:
        raise SystemExit(f"APPLIANCE_TEST_SLOWDOWN must be from 1 to 100, got {text!r}")
    return value


SLOWDOWN = _slowdown()

# Seconds for one test of each tier (its directory under tests/), before SLOWDOWN.
TIER_BUDGETS = {
    "unit": 180.0,  # no servers; a few run a command or a replica's process
    "integration": 600.0,  # real coordinators, replicas, PostgreSQL, a kube-apiserver, a browser
    "e2e": 600.0,  # `appliance serve` and the launcher as a user runs them
    "deploy": 300.0,  # helm template and the chart's checks
    "node": 1200.0,  # a real node: the image, helm, pods killed and replaced, two coordinators
}
DEFAULT_BUDGET = 120.0  # a test outside these tiers


def tier_of(path: Path) -> str | None:
    """The tier of a test file: its first directory under tests/."""
    try:
        parts = path.resolve().relative_to(TESTS).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 and parts[0] in TIER_BUDGETS else None


def budget_of(path: Path) -> float:
    """The budget of a test in `path`, before SLOWDOWN."""
    tier = tier_of(path)
    return TIER_BUDGETS[tier] if tier else DEFAULT_BUDGET


def scaled(seconds: float) -> float:
    """A wait of a shared helper, stretched by APPLIANCE_TEST_SLOWDOWN."""
    return seconds * SLOWDOWN
