"""Training summaries in the model directory: TensorBoard event files and `metrics.jsonl`.

Every `runconfig.log_steps` steps the chief records the loss, the learning rate and samples/s
(keys `loss`, `learning_rate`, `samples_per_second`); each evaluation records `eval_loss` and
`eval_accuracy`. Each line of metrics.jsonl is one JSON object with a `step` and some of these
keys; `metrics.json` holds the job's final `step`, `loss`, `learning_rate` and evaluation
under the same names. One naming for both files: a program reads either with the same keys.
TensorBoard groups a tag under the section before its "/", so there the evaluation's tags are
`eval/loss` and `eval/accuracy` (TENSORBOARD_TAGS); the other tags are the keys themselves.

`weights.npz`, beside the checkpoints, holds the newest checkpoint's weights alone (no
optimizer state) as plain NumPy arrays, one per tensor, keyed `<tensor>_<layer>` with the
names each model gives its tensors (appliance/workers/models/): fc_mnist's layer 0 is
`weight_0` and `bias_0`. Load it with `numpy.load("weights.npz")`; `checkpoint_<step>.npz`
is what a job resumes from.

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

# The TensorBoard tag of a key, where it is not the key itself.
TENSORBOARD_TAGS = {"eval_loss": "eval/loss", "eval_accuracy": "eval/accuracy"}


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
        for key, value in scalars.items():
            self._events.add_scalar(TENSORBOARD_TAGS.get(key, key), value, step)
        self._lines.write((json.dumps({"step": step, **scalars}) + "\n").encode())
        self._lines.flush()

    def close(self) -> None:
        self._events.close()
        self._held.close()


def write_final_metrics(model_dir: Path, metrics: dict[str, Any]) -> None:
    """metrics.json: the job's final step, loss and evaluation results."""
    text = json.dumps(metrics, sort_keys=True) + "\n"
    write_whole(model_dir / "metrics.json", lambda file: file.write(text.encode()))
