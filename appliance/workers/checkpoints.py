"""Checkpoints: `model_dir/checkpoint_<step>.npz`, written atomically, read to resume.

Format (a NumPy .npz archive, no pickled objects):
- `format`: "wafer-appliance-checkpoint/1";
- `step`: int64, the number of updates applied (training resumes at this step);
- `params_digest`: sha256 of the params `model` section (Params.model_digest); resuming with a
  different model is refused;
- `optimizer_type`: the optimizer that produced the state;
- `weights/<layer>/<tensor>`: float32 weights of every streamed layer (unit);
- `optimizer/<layer>/<slot>/<tensor>`: float32 optimizer state (slots: "momentum" for SGD with
  momentum, "exp_avg" and "exp_avg_sq" for AdamW);
- `input_position` (a job on a data set): int64 [epoch, offset, seed], where the next global
  batch (that of `step`) starts in the data set's order. Absent in older checkpoints and on
  synthetic data: the position then follows from the step alone.

The archive is written to a hidden temporary file in the same directory, fsynced and renamed
over the final name, so a process killed mid-write never leaves a torn checkpoint_<step>.npz.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from appliance.safe_paths import is_npz_start, not_npz
from appliance.workers.models.model import Tensors
from appliance.workers.models.optimizers import OptimizerState
from appliance.workers.safe_files import open_read, write_whole

FORMAT = "wafer-appliance-checkpoint/1"
_NAME = re.compile(r"^checkpoint_(\d+)\.npz$")


log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class DataPosition:
    """Where a data set's next global batch starts: sample `offset` of epoch `epoch`'s order,
    drawn from shuffle seed `seed` (0 unshuffled)."""

    epoch: int
    offset: int
    seed: int


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """Everything MemoryX needs to continue a job at `step` (and the input workers: where)."""

    step: int
    params_digest: str
    optimizer_type: str
    weights: dict[int, Tensors]
    states: dict[int, OptimizerState]
    input_position: DataPosition | None = None


def checkpoint_path(model_dir: Path, step: int) -> Path:
    return model_dir / f"checkpoint_{step}.npz"


def latest_checkpoint(model_dir: Path) -> Path | None:
    """The complete checkpoint with the highest step in `model_dir`, if any."""
    return next(iter(_newest_first(model_dir)), None)


def newest_readable(model_dir: Path) -> Path | None:
    """The checkpoint with the highest step in `model_dir` that reads back whole (one that
    cannot, torn or planted, is passed over for the one before), if any."""
    for path in _newest_first(model_dir):
        try:
            read_checkpoint(path)
        except ValueError as err:
            log.warning("not resuming from %s: %s", path, err)
            continue
        return path
    return None


def _newest_first(model_dir: Path) -> list[Path]:
    """The model dir's checkpoints by step, highest first."""
    found = [(int(m.group(1)), p) for p in model_dir.glob("checkpoint_*.npz")
             if (m := _NAME.match(p.name))]  # fmt: skip
    return [path for _, path in sorted(found, reverse=True)]


def split_layer_state(tensors: Tensors) -> tuple[Tensors, OptimizerState]:
    """Split a layer streamed with its optimizer state ("<slot>/<name>") into the two parts."""
    weights: Tensors = {}
    state: OptimizerState = {}
    for key, array in tensors.items():
        slot, _, name = key.rpartition("/")
        if slot:
            state.setdefault(slot, {})[name] = array
        else:
            weights[key] = array
    return weights, state


def write_checkpoint(model_dir: Path, checkpoint: Checkpoint) -> Path:
    """Write atomically and durably, never through a link; returns the final path."""
    arrays: dict[str, Any] = {
        "format": np.array(FORMAT),
        "step": np.array(checkpoint.step, dtype=np.int64),
        "params_digest": np.array(checkpoint.params_digest),
        "optimizer_type": np.array(checkpoint.optimizer_type),
    }
    if (where := checkpoint.input_position) is not None:
        arrays["input_position"] = np.array([where.epoch, where.offset, where.seed], np.int64)
    for layer, tensors in sorted(checkpoint.weights.items()):
        for name, array in tensors.items():
            arrays[f"weights/{layer}/{name}"] = array
    for layer, state in sorted(checkpoint.states.items()):
        for slot, tensors in state.items():
            for name, array in tensors.items():
                arrays[f"optimizer/{layer}/{slot}/{name}"] = array
    final = checkpoint_path(model_dir, checkpoint.step)
    write_whole(final, lambda file: np.savez(file, **arrays), durable=True)
    return final


def read_checkpoint(path: Path) -> Checkpoint:
    """Load a checkpoint; raises ValueError with a sentence saying what is wrong."""
    contents: dict[str, Any] | None = None
    try:
        with open_read(path) as file:
            if is_npz_start(file.read(4)):
                file.seek(0)
                with np.load(file, allow_pickle=False) as archive:
                    contents = {key: archive[key] for key in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        raise ValueError(f"checkpoint {path} cannot be read: {err}") from None
    if contents is None:  # numpy's own sentence would suggest loading it with allow_pickle
        raise ValueError(not_npz(path))
    if str(contents.get("format", "")) != FORMAT:
        raise ValueError(f"{path} is not a {FORMAT} checkpoint")
    weights: dict[int, Tensors] = {}
    states: dict[int, OptimizerState] = {}
    for key, array in contents.items():
        kind, _, rest = key.partition("/")
        if kind == "weights":
            layer, _, name = rest.partition("/")
            weights.setdefault(int(layer), {})[name] = array
        elif kind == "optimizer":
            layer, slot, name = rest.split("/", 2)
            states.setdefault(int(layer), {}).setdefault(slot, {})[name] = array
    return Checkpoint(
        step=int(contents["step"]),
        params_digest=str(contents["params_digest"]),
        optimizer_type=str(contents["optimizer_type"]),
        weights=weights,
        states=states,
        input_position=_input_position(path, contents.get("input_position")),
    )


def _input_position(path: Path, saved: Any) -> DataPosition | None:
    if saved is None:
        return None
    if saved.shape != (3,) or saved.dtype != np.int64 or (saved < 0).any():
        raise ValueError(f"{path}: input_position is not three non-negative int64 numbers")
    epoch, offset, seed = (int(n) for n in saved)
    return DataPosition(epoch, offset, seed)


def check_compatible(checkpoint: Checkpoint, params_digest: str, optimizer_type: str) -> None:
    """Raise ValueError unless the checkpoint was made by the same model and optimizer."""
    if checkpoint.params_digest != params_digest:
        raise ValueError(
            "the checkpoint was written for a different `model` section; resume with the "
            "params it was trained with"
        )
    if checkpoint.optimizer_type != optimizer_type:
        raise ValueError(
            f"the checkpoint holds {checkpoint.optimizer_type} state but optimizer.optimizer_type"
            f" is {optimizer_type}"
        )
