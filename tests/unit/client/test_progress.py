"""How job events read on a terminal and in a log: phase lines, progress bar, plain lines."""

from __future__ import annotations

import io
import re
import subprocess
import sys

from appliance.client.progress import EventPrinter, describe_event
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


def test_on_a_terminal_progress_is_one_bar_with_rate_time_left_and_loss() -> None:
    out = io.StringIO()
    printer = EventPrinter(out, tty=True)

    for event in (_phase(None, Phase.RUNNING), _progress(1), _progress(2), _progress(50)):
        printer.show(event)
    printer.show(_phase(Phase.RUNNING, Phase.SUCCEEDED))

    lines = out.getvalue().split("\n")
    assert lines[0].endswith("RUNNING")
    bar = lines[1].split("\r")[-1]  # the bar as last drawn, in place of the earlier ones
    assert re.search(
        r" 50%\|.*\| 50/100 \[\d\d:\d\d<\d\d:\d\d, +\S+step/s, loss 0\.5000\]", bar
    ), bar
    assert lines[2].endswith("RUNNING -> SUCCEEDED")


def test_the_bar_gives_the_newest_evaluation() -> None:
    out = io.StringIO()
    printer = EventPrinter(out, tty=True)
    scored = Progress(step=6, num_steps=6, loss=2.5, eval_loss=2.125, eval_accuracy=0.391)
    printer.show(JobEvent("wsjob-x", EventKind.PROGRESS, 0.0, progress=scored))
    printer.close()
    assert "loss 2.5000, eval loss 2.1250, accuracy 39.1%]" in out.getvalue()


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


def test_csctl_and_the_launcher_load_tqdm_only_to_draw_a_bar() -> None:
    """csctl must stay quick to start: the bar's library is loaded where a bar is drawn."""
    loads = "import sys, csctl.cli, appliance.client.launcher; print('tqdm' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", loads], capture_output=True, text=True)
    assert done.stdout == "False\n", done.stderr
