"""Training summaries in the model directory: TensorBoard event files and `metrics.jsonl`.

Every `runconfig.log_steps` steps the chief records the loss, the learning rate and samples/s
(TensorBoard tags `loss`, `learning_rate`, `samples_per_second`; evaluations add `eval/loss`
and `eval/accuracy`). Each line of metrics.jsonl is one JSON object with a `step` and the
same keys. `metrics.json` holds the final metrics of the job.

Files are written without following links planted in the model directory (safe_files.py). The
event file is written by tensorboardX, which opens paths itself: it is given the directory as
the descriptor opened (without links) at the start, /proc/self/fd/N, so a directory swapped for
a link later changes nothing, and a name no one can guess ahead (a random suffix), so no link
can wait for it.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from pathlib import Path
from typing import Any

from tensorboardX import SummaryWriter  # type: ignore[import-untyped]

from appliance.workers.safe_files import directory, open_append, write_whole


class SummaryLog:
    """Appends scalars to the event file and metrics.jsonl of one model directory."""

    def __init__(self, model_dir: Path) -> None:
        self.model_dir = model_dir
        self._held = contextlib.ExitStack()
        folder = self._held.enter_context(directory(model_dir))
        self._lines = self._held.enter_context(open_append(model_dir / "metrics.jsonl"))
        self._events = SummaryWriter(
            logdir=f"/proc/self/fd/{folder}",
            filename_suffix=f".{secrets.token_hex(8)}",
            flush_secs=5,
        )

    def record(self, step: int, scalars: dict[str, float]) -> None:
        for tag, value in scalars.items():
            self._events.add_scalar(tag, value, step)
        self._lines.write((json.dumps({"step": step, **scalars}) + "\n").encode())
        self._lines.flush()

    def close(self) -> None:
        self._events.close()
        self._held.close()


def write_final_metrics(model_dir: Path, metrics: dict[str, Any]) -> None:
    """metrics.json: the job's final step, loss and evaluation results."""
    text = json.dumps(metrics, sort_keys=True) + "\n"
    write_whole(model_dir / "metrics.json", lambda file: file.write(text.encode()))
