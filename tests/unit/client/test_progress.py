"""How job events read on a terminal and in a log: phase lines, progress bar, plain lines."""

from __future__ import annotations

import io

from appliance.client.progress import EventPrinter, describe_event, progress_bar
from appliance.domain.job import EventKind, JobEvent, Progress
from appliance.domain.phases import Phase


def _progress(step: int, total: int = 100) -> JobEvent:
    progress = Progress(step=step, num_steps=total, loss=0.5, steps_per_second=4.0)
    return JobEvent("wsjob-x", EventKind.PROGRESS, 0.0, progress=progress)


def _phase(old: Phase | None, new: Phase, reason: str = "") -> JobEvent:
    return JobEvent("wsjob-x", EventKind.PHASE, 0.0, 1, old, new, reason)


def test_events_read_as_one_line_each() -> None:
    assert describe_event(_phase(Phase.QUEUED, Phase.SCHEDULED, "cs2-01")) == (
        "--:--:--  QUEUED -> SCHEDULED  cs2-01"
    )
    assert describe_event(_progress(40)) == "--:--:--  step 40/100  loss 0.5000  4.0 steps/s"


def test_progress_bar_fills_with_the_steps() -> None:
    bar = progress_bar(Progress(step=50, num_steps=100), width=10)
    assert bar.startswith("[#####-----]  50%  step 50/100")
    assert progress_bar(Progress(step=3, num_steps=0)).startswith("step 3  loss")


def test_on_a_terminal_progress_rewrites_one_line() -> None:
    out = io.StringIO()
    printer = EventPrinter(out, tty=True)

    for event in (_phase(None, Phase.RUNNING), _progress(1), _progress(2)):
        printer.show(event)
    printer.show(_phase(Phase.RUNNING, Phase.SUCCEEDED))

    lines = out.getvalue().split("\n")
    assert lines[0].endswith("RUNNING")
    assert lines[1].count("\r\x1b[2K") == 2 and "step 2/100" in lines[1]
    assert lines[2].endswith("RUNNING -> SUCCEEDED")


def test_in_a_log_progress_is_throttled_plain_lines_keeping_the_last_step() -> None:
    out = io.StringIO()
    now = [0.0]
    printer = EventPrinter(out, tty=False, plain_interval=1.0, clock=lambda: now[0])

    printer.show(_progress(1))
    printer.show(_progress(2))  # within the interval: skipped
    now[0] = 1.5
    printer.show(_progress(3))
    printer.show(_progress(100))  # the last step is always shown

    steps = [line.split()[2] for line in out.getvalue().splitlines()]
    assert steps == ["1/100", "3/100", "100/100"]
    assert "\r" not in out.getvalue()
