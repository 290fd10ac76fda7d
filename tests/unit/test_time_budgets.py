"""No test waits longer than it may run: the waits a test writes (`timeout=N`, `within=N`, and
the bound given to `wait_until`/`wait_for`) add up to less than its budget (tests/timing.py).

A wait inside a loop counts once, and waits inside the helpers a test calls are the helpers'
(they bound themselves); what this catches is the plain case, a test that asks to wait 300 s
inside a 120 s timeout, which fails only on a busy machine."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests import timing

WAITERS = {"wait_until", "wait_for"}
BOUNDS = {"timeout", "within"}


def _number(node: ast.expr) -> float | None:
    number = isinstance(node, ast.Constant) and isinstance(node.value, int | float)
    return float(node.value) if number and not isinstance(node.value, bool) else None  # type: ignore[attr-defined]


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def waits_in(function: ast.AST) -> float:
    """The seconds of every wait written in `function`'s body."""
    total = 0.0
    for node in ast.walk(function):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            seconds = _number(keyword.value) if keyword.arg in BOUNDS else None
            total += seconds or 0.0
        if _name(node.func) in WAITERS:
            total += sum(s for arg in node.args[1:] if (s := _number(arg)) is not None)
    return total


def asked_timeout(function: ast.FunctionDef | ast.AsyncFunctionDef) -> float | None:
    """N of an `@pytest.mark.timeout(N)` on the test."""
    for decorator in function.decorator_list:
        timeout = isinstance(decorator, ast.Call) and _name(decorator.func) == "timeout"
        if timeout and decorator.args and (seconds := _number(decorator.args[0])) is not None:
            return seconds
    return None


def declared_tests(path: Path) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        if function and node.name.startswith("test_"):  # type: ignore[attr-defined]
            yield node  # type: ignore[misc]


def test_every_test_waits_less_than_its_budget() -> None:
    over = []
    files = sorted(timing.TESTS.rglob("test_*.py"))
    assert len(files) > 100
    for path in files:
        for test in declared_tests(path):
            budget = asked_timeout(test) or timing.budget_of(path)
            waits = waits_in(test)
            if waits > budget:
                where = path.relative_to(timing.TESTS.parent)
                over.append(f"{where}::{test.name} waits {waits:g} s in a {budget:g} s budget")
    assert not over, "\n".join(over)


def test_the_check_counts_waits_as_written() -> None:
    source = """
def test_x():
    wait_until(ready, 120, "ready")
    job.wait(timeout=300)
    run(within=5.5)
    wait_for(check, "x", 60)
    subprocess.run(cmd, timeout=30, check=True)
"""
    (test,) = ast.parse(source).body
    assert waits_in(test) == 120 + 300 + 5.5 + 60 + 30


def test_each_tier_has_a_budget_and_the_node_tier_the_longest() -> None:
    assert timing.budget_of(timing.TESTS / "node" / "test_x.py") == max(
        timing.TIER_BUDGETS.values()
    )
    assert timing.budget_of(timing.TESTS / "unit" / "x" / "test_y.py") == 180
    assert timing.tier_of(Path("/elsewhere/test_z.py")) is None
