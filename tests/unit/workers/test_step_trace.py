"""The opt-in step timeline: off by default, a window of steps when on."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.workers import step_trace
from appliance.workers.step_trace import StepTrace


def test_off_by_default_records_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(step_trace.ENV_DIR, raising=False)
    trace = StepTrace.from_env()
    trace.mark("cs2_gradient_out", 150, 0)
    trace.write("cs2-0")
    assert trace.events == [] and list(tmp_path.iterdir()) == []


def test_records_the_window_and_writes_one_file_per_replica(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(step_trace.ENV_DIR, str(tmp_path / "trace"))
    monkeypatch.setenv(step_trace.ENV_FROM, "10")
    monkeypatch.setenv(step_trace.ENV_STEPS, "2")
    trace = StepTrace.from_env()
    for step in (9, 10, 11, 12):
        trace.mark("memoryx_updated", step, 3)
    trace.write("memoryx-1")
    rows = [
        line.split("\t")
        for line in (tmp_path / "trace" / "memoryx-1.tsv").read_text().splitlines()
    ]
    assert [(event, step, unit) for _, event, step, unit in rows] == [
        ("memoryx_updated", "10", "3"),
        ("memoryx_updated", "11", "3"),
    ]
    first, second = (int(stamp) for stamp, *_ in rows)
    assert 0 < first <= second
