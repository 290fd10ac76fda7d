"""Training summaries in the model directory: TensorBoard event files and `metrics.jsonl`.

The chief records the loss, the learning rate and samples/s (keys `loss`, `learning_rate`,
`samples_per_second`) every `runconfig.log_steps` steps, or without it about
DEFAULT_LOG_POINTS times a run (every step of a run that short: `log_interval`), and at the
last step; each evaluation records `eval_loss` and `eval_accuracy`. Each line of metrics.jsonl
is one JSON object with a `step`, some of these keys and the `job` that wrote it;
`metrics.json` holds the job's final `step`, `loss`, `learning_rate` and evaluation under the
same names. One naming for both files: a program reads either with the same keys.

TensorBoard's files are where the Model Zoo puts them: training in `{model_dir}/train/` (tags
`loss`, `learning_rate`, `samples_per_second`), evaluations in `{model_dir}/eval/` (tags `loss`
and `eval/accuracy`, EVAL_TAGS): `tensorboard --logdir {model_dir}` shows the runs "train" and
"eval", their losses on one chart.

A run that resumes from step S (a second run into the model dir, a restart, a preemption) drops
what an earlier run recorded after S: its event files start with TensorBoard's purge marker
(SessionLog.START at S + 1, what tensorboardX's purge_step writes), so TensorBoard forgets the
older files' points past S, and metrics.jsonl is rewritten without its lines past S. Two runs'
points never show as one curve.

`weights.npz`, beside the checkpoints, holds the newest checkpoint's weights alone (no
optimizer state) as plain NumPy arrays, one per tensor, keyed `<tensor>_<layer>` with the
names each model gives its tensors (appliance/workers/models/): fc_mnist's layer 0 is
`weight_0` and `bias_0`. Load it with `numpy.load("weights.npz")`; `checkpoint_<step>.npz`
is what a job resumes from.

Files are written without following links planted in the model directory (safe_files.py). The
event files are written by tensorboardX, which opens paths itself: it is given the directory
as the descriptor opened (without links), /proc/self/fd/N, so a directory swapped for a link
later changes nothing, and a name no one can guess ahead (a random suffix, after the time that
keeps the files of one directory in the order they were made), so no link can wait for it.
"""

from __future__ import annotations

import contextlib
import json
import math
import secrets
import time
from pathlib import Path
from typing import Any, BinaryIO

from tensorboardX import SummaryWriter  # type: ignore[import-untyped]

from appliance.workers.safe_files import directory, open_append, open_read, write_whole

# About how many points a run's training curves get when runconfig.log_steps is not set.
DEFAULT_LOG_POINTS = 100
# The evaluation's keys and the tags TensorBoard shows them under (in eval/), as the Model Zoo
# names them; every other key is written to train/ under its own name.
EVAL_TAGS = {"eval_loss": "loss", "eval_accuracy": "eval/accuracy"}
# A metrics.jsonl line longer than this is not one of ours: dropped when the file is rewritten.
MAX_LINE_BYTES = 1 << 16


def log_interval(log_steps: int | None, num_steps: int) -> int:
    """Steps between two training summaries: `log_steps`, else about DEFAULT_LOG_POINTS a run
    (every step of a run of at most that many steps). A multiple of it is logged whatever step
    a run resumed from, so a resumed run's points fall where an uninterrupted run's do."""
    return log_steps or max(1, math.ceil(num_steps / DEFAULT_LOG_POINTS))


class SummaryLog:
    """Appends scalars to the event files and metrics.jsonl of one model directory.

    `resumed_at`: the step a training run starts from (0: the start); what was recorded after
    it is dropped. None (an evaluation of a checkpoint): nothing is dropped. `job`: the job id
    each metrics.jsonl line carries (`job`), so a job's curves are told from a later run's."""

    def __init__(self, model_dir: Path, resumed_at: int | None = None, job: str = "") -> None:
        self.model_dir = model_dir
        self._job = {"job": job} if job else {}  # whose line it is: a model dir outlives jobs
        self._purge = None if resumed_at is None else resumed_at + 1
        self._held = contextlib.ExitStack()
        self._writers: dict[str, Any] = {}
        lines = model_dir / "metrics.jsonl"
        if resumed_at is not None:
            _drop_lines_after(lines, resumed_at)
        self._lines = self._held.enter_context(open_append(lines))
        if resumed_at is not None:  # the purge marker in each folder an earlier run wrote
            for kind in ("train", "eval"):
                if (model_dir / kind).is_dir():  # a hint: the writer opens it without links
                    self._writer(kind)

    def record(self, step: int, scalars: dict[str, float]) -> None:
        for key, value in scalars.items():
            kind = "eval" if key in EVAL_TAGS else "train"
            self._writer(kind).add_scalar(EVAL_TAGS.get(key, key), value, step)
        self._lines.write((json.dumps({"step": step, **scalars, **self._job}) + "\n").encode())
        self._lines.flush()

    def _writer(self, kind: str) -> Any:
        """The event file of train/ or eval/, made at its first scalar (an eval job has no
        train/, a train job without evaluations no eval/)."""
        writer = self._writers.get(kind)
        if writer is None:
            folder = self._held.enter_context(directory(self.model_dir / kind))
            writer = SummaryWriter(
                logdir=f"/proc/self/fd/{folder}",
                # TensorBoard reads a directory's files in name order: the time in
                # nanoseconds orders two runs of the same second (the purge marker must come
                # after the points it drops), the random part makes the name unguessable.
                filename_suffix=f".{time.time_ns()}.{secrets.token_hex(8)}",
                flush_secs=5,
                purge_step=self._purge,
            )
            self._writers[kind] = writer
        return writer

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._held.close()


def _drop_lines_after(path: Path, step: int) -> None:
    """Rewrite metrics.jsonl without the lines of steps after `step` (an earlier run's)."""
    try:
        source = open_read(path)
    except OSError:  # none yet (UnsafePath if it is not a file: open_append says so next)
        return
    with source:
        write_whole(path, lambda out: _copy_lines(source, out, step))


def _copy_lines(source: BinaryIO, out: BinaryIO, last_step: int) -> None:
    while line := source.readline(MAX_LINE_BYTES):
        if not line.endswith(b"\n"):  # too long, or cut short: not a line of ours
            while (rest := source.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                pass
            continue
        step = _step_of(line)
        if step is None or step <= last_step:
            out.write(line)


def _step_of(line: bytes) -> int | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    step = record.get("step") if isinstance(record, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def write_final_metrics(model_dir: Path, metrics: dict[str, Any]) -> None:
    """metrics.json: the job's final step, loss and evaluation results."""
    text = json.dumps(metrics, sort_keys=True) + "\n"
    write_whole(model_dir / "metrics.json", lambda file: file.write(text.encode()))
