"""Which checkpoint a job starts from, chosen at submit where the coordinator can see it.

As in the Model Zoo: `runconfig.checkpoint_path` when the job names one; else the newest
`checkpoint_<step>.npz` in its model dir, unless `runconfig.autoload_last_checkpoint` is false
(a training job then starts over at step 0; the replicas set the earlier run's files aside,
workers/model_dir_runs.py). The choice is written into the job's params as
`runconfig.checkpoint_path`, so the job records what it starts from (`csctl get job ID -o
table`: STARTS FROM), and refused before anything is reserved when it cannot be made:

- `--mode eval` with no checkpoint to evaluate (naming model_dir);
- a training job whose model dir's newest checkpoint is already at or past num_steps, the step
  it ends at (naming num_steps): nothing would be trained.

A job that waits for others (depends_on) may be given the checkpoint one of them writes: when
none is there yet, the choice is left to its chief at start. Runs on a thread (it lists the
model dir); only with a backend whose replicas write the model dirs this process sees.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from appliance.domain.errors import InvalidSpec
from appliance.domain.params import parse_params
from appliance.domain.spec import JobSpec, Mode, checkpoint_path_of, with_checkpoint_path

_NAME = re.compile(r"^checkpoint_(\d{1,18})\.npz$")


def choose_checkpoint(spec: JobSpec) -> JobSpec:
    """`spec` (its model dir placed, canonical) starting from the checkpoint chosen for it;
    raises InvalidSpec naming the field when there is none to evaluate or nothing to train."""
    if checkpoint_path_of(spec) or spec.mode is Mode.COMPILE:
        return spec
    model_dir = Path(spec.model_dir)
    if spec.mode is not Mode.EVAL and not _autoload(spec):
        return spec
    newest = newest_checkpoint(model_dir)
    if newest is None:
        if spec.mode is Mode.EVAL and not spec.depends_on:
            raise InvalidSpec(
                f"mode eval evaluates a checkpoint and model_dir {str(model_dir)!r} holds none "
                "(checkpoint_<step>.npz): pass --checkpoint_path (runconfig.checkpoint_path), "
                "or train into that model dir first",
                field="model_dir",
            )
        return spec
    step, path = newest
    if spec.mode is not Mode.EVAL and step >= spec.num_steps:
        raise InvalidSpec(
            f"num_steps {spec.num_steps} is the step training ends at, and model_dir "
            f"{str(model_dir)!r} already holds {path.name}: ask for more steps to continue "
            "from it, or set runconfig.autoload_last_checkpoint: false "
            "(--autoload_last_checkpoint false) to start over",
            field="num_steps",
        )
    return with_checkpoint_path(spec, str(path))


def newest_checkpoint(model_dir: Path) -> tuple[int, Path] | None:
    """The step and path of the model dir's checkpoint_<step>.npz of the highest step that is
    a regular file (not a link), if any."""
    try:
        names = os.listdir(model_dir)
    except OSError:  # not there yet (or not a directory: the model dir checks say so)
        return None
    steps = sorted(((int(m.group(1)), n) for n in names if (m := _NAME.match(n))), reverse=True)
    for step, name in steps:
        try:
            found = os.lstat(model_dir / name)
        except OSError:
            continue
        if stat.S_ISREG(found.st_mode):
            return step, model_dir / name
    return None


def _autoload(spec: JobSpec) -> bool:
    # Parsed whole, as the replicas read it: a key accepted and not used (save_losses) is not a
    # RunConfig field, so validating the raw runconfig alone would refuse it and read true.
    try:  # checked with the rest of the params already: only its value is wanted here
        return parse_params(spec.params).runconfig.autoload_last_checkpoint
    except InvalidSpec:
        return True
