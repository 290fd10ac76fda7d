"""A job's events as a person reads them: phase lines, progress lines and a progress bar.

Shared by the launcher (`python -m appliance.run`) and `csctl events -f`. On a terminal the
progress is a tqdm bar (steps, rate, time left, the loss), rewritten in place and fitted to
the terminal's width; anywhere else (a log file, a pipe) it is plain lines, at most one per
`plain_interval` seconds plus the last step, so logs stay readable. tqdm is imported only
when a bar is drawn: csctl and pipes never load it.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Never, TextIO

from appliance.domain.display import printable
from appliance.domain.job import EventKind, JobEvent, Progress

if TYPE_CHECKING:
    from tqdm import tqdm


def clock_time(unix_seconds: float) -> str:
    """`HH:MM:SS` in local time, or `--:--:--` for an unknown time."""
    if not unix_seconds:
        return "--:--:--"
    return datetime.datetime.fromtimestamp(unix_seconds).strftime("%H:%M:%S")


def describe_progress(progress: Progress) -> str:
    """`step 40/100  loss 0.1234  12.5 steps/s`, and the newest evaluation once there is one."""
    return str(progress)


def describe_event(event: JobEvent) -> str:
    """One line: `12:00:01  QUEUED -> SCHEDULED  reason` or `12:00:05  step 40/100 ...`."""
    if event.kind is EventKind.PROGRESS and event.progress is not None:
        return f"{clock_time(event.time)}  {describe_progress(event.progress)}"
    source = f"{event.from_phase} -> " if event.from_phase else ""
    reason = f"  {event.reason}" if event.reason else ""
    return f"{clock_time(event.time)}  {source}{event.to_phase}{reason}"


class EventPrinter:
    """Prints a job's events to `out`: phases as lines, progress as a bar or throttled lines."""

    def __init__(
        self,
        out: TextIO,
        *,
        tty: bool | None = None,
        plain_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._out = out
        self._tty = out.isatty() if tty is None else tty
        self._plain_interval = plain_interval
        self._clock = clock
        self._bar: tqdm[Never] | None = None  # on a terminal, while progress is shown
        self._last_plain: float | None = None
        self.last_progress: Progress | None = None

    def show(self, event: JobEvent) -> None:
        """Print one event (phase change or progress)."""
        if event.kind is EventKind.PROGRESS and event.progress is not None:
            self._show_progress(event)
            return
        self._end_bar()
        self._out.write(printable(describe_event(event)) + "\n")
        self._out.flush()

    def message(self, text: str) -> None:
        """Print a line of its own (the bar, if shown, is ended first)."""
        self._end_bar()
        self._out.write(printable(text) + "\n")
        self._out.flush()

    def close(self) -> None:
        """End the progress bar line, if one is shown."""
        self._end_bar()

    def _show_progress(self, event: JobEvent) -> None:
        assert event.progress is not None
        self.last_progress = event.progress
        if self._tty:
            self._draw(event.progress)
        else:
            now = self._clock()
            last_step = event.progress.step >= event.progress.num_steps > 0
            recent = self._last_plain is not None and now - self._last_plain < self._plain_interval
            if recent and not last_step:
                return
            self._last_plain = now
            self._out.write(printable(describe_event(event)) + "\n")
        self._out.flush()

    def _draw(self, progress: Progress) -> None:
        if self._bar is not None and progress.step < self._bar.n:  # resumed further back
            self._end_bar()
        bar = self._bar
        if bar is None:
            from tqdm import tqdm

            bar = tqdm(
                total=progress.num_steps or None, initial=progress.step, file=self._out,
                unit="step", dynamic_ncols=True, mininterval=0, leave=True,
            )  # fmt: skip
            self._bar = bar
        bar.set_postfix_str(_bar_postfix(progress), refresh=False)
        bar.update(progress.step - bar.n)

    def _end_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _bar_postfix(progress: Progress) -> str:
    """What the bar adds to its steps, rate and time left: the loss and the evaluation."""
    parts = [f"loss {progress.loss:.4f}"]
    if progress.eval_loss is not None:
        parts.append(f"eval loss {progress.eval_loss:.4f}")
    if progress.eval_accuracy is not None:
        parts.append(f"accuracy {progress.eval_accuracy:.1%}")
    return ", ".join(parts)
