"""Fuzz tests report how many cases they tried; the summary at the end of the run prints it.

A `print` in a test is captured (and shown only on failure or with -s), so the counts went
unseen in `make test`; tests/conftest.py's pytest_terminal_summary prints these lines instead.
"""

from __future__ import annotations

LINES: list[str] = []


def report(line: str) -> None:
    """Show `line` in the test run's final summary."""
    LINES.append(line)
