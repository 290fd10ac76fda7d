"""Which checkpoint a job starts from, and one run's files in a model directory at a time.

As in the Model Zoo, a job starts from `runconfig.checkpoint_path` when it names one (the
coordinator records there, at submit, the newest checkpoint of the model dir it chose:
services/checkpoint_choice.py), else from the newest checkpoint in its model dir unless
`runconfig.autoload_last_checkpoint` is false; `--mode eval` needs one. A later attempt of the
same job (a restart, a preemption) resumes from the newest checkpoint it wrote.

At a training job's first attempt the files of earlier runs that are not its own past are set
aside under `earlier_runs/<n>/` (all of them when it starts afresh or from a checkpoint outside
the model dir, the checkpoints after its start when it starts from one inside), so checkpoints,
weights.npz, metrics and TensorBoard's files never mix two runs; the summaries drop what an
earlier run recorded past the start (summaries.py). Moves are renames through descriptors
opened without following links (safe_files.py): a planted link is moved, never followed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from appliance.workers import checkpoints
from appliance.workers.safe_files import directory
from appliance.workers.topology import JobLayout

EARLIER_RUNS = "earlier_runs"
# What a run writes into its model dir (besides checkpoint_<step>.npz).
_RUN_FILES = frozenset({"weights.npz", "metrics.json", "metrics.jsonl", "train", "eval"})
_CHECKPOINT = re.compile(r"^checkpoint_(\d+)\.npz$")
_OLD_EVENTS = "events.out.tfevents."  # event files of the layout before train/ and eval/


def start_checkpoint(layout: JobLayout, attempt: int) -> str:
    """The checkpoint the job starts from ("" none), after setting aside what an earlier run
    left that is not part of this one. Raises ValueError when `--mode eval` has none."""
    model_dir = Path(layout.model_dir)
    runconfig = layout.params.runconfig
    if attempt > 1:  # a restart: from the newest this job wrote, else where it began
        newest = checkpoints.newest_readable(model_dir)
        return str(newest) if newest is not None else layout.resume_from
    chosen = layout.resume_from
    if not chosen and runconfig.autoload_last_checkpoint:
        newest = checkpoints.newest_readable(model_dir)
        chosen = str(newest) if newest is not None else ""
    if layout.mode == "eval":
        if not chosen:
            raise ValueError(
                f"mode eval evaluates a checkpoint and model_dir {model_dir} holds none: pass "
                "--checkpoint_path (runconfig.checkpoint_path) or train into the model dir first"
            )
        return chosen
    if chosen and Path(chosen).parent == model_dir:
        set_aside(model_dir, after_step=checkpoint_step(Path(chosen)))
    else:
        set_aside(model_dir, after_step=None)
    return chosen


def checkpoint_step(path: Path) -> int | None:
    """The step in a checkpoint's name, if it is named checkpoint_<step>.npz."""
    found = _CHECKPOINT.match(path.name)
    return int(found.group(1)) if found else None


def set_aside(model_dir: Path, after_step: int | None) -> Path | None:
    """Move an earlier run's files into earlier_runs/<n>/: with `after_step`, the checkpoints
    of later steps only; without, every file a run writes. Returns where they went, if any."""
    with directory(model_dir) as folder:
        names = sorted(n for n in os.listdir(folder) if _is_set_aside(n, after_step))
        if not names:
            return None
        with directory(model_dir / EARLIER_RUNS) as runs:
            taken = [int(n) for n in os.listdir(runs) if n.isdigit() and len(n) < 10]
            target = model_dir / EARLIER_RUNS / str(max(taken, default=0) + 1)
        with directory(target) as moved:
            for name in names:
                os.rename(name, name, src_dir_fd=folder, dst_dir_fd=moved)
    return target


def _is_set_aside(name: str, after_step: int | None) -> bool:
    found = _CHECKPOINT.match(name)
    if after_step is not None:
        return found is not None and int(found.group(1)) > after_step
    return found is not None or name in _RUN_FILES or name.startswith(_OLD_EVENTS)
