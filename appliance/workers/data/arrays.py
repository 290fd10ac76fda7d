"""Image data sets held in memory, and the checks every image format's arrays pass.

An image data set becomes float32 inputs of shape (n, model.input_size) and int64 labels in
0..num_classes-1; uint8 pixels are scaled to [0, 1], floating inputs are kept as they are and
must be finite (in float32). The whole set is read at open (bounded by MAX_SET_BYTES), so a
hostile file fails the job when its input workers start, not hours into it. Pixels are held as
the bytes they are and scaled as a batch is read (the same float32 values): in float32 a
set would take four times the memory in every input worker.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import numpy.typing as npt

from appliance.workers.data.errors import DataError
from appliance.workers.models.model import Array, Batch, Labels

# The most an in-memory data set may hold (its inputs, as held).
MAX_SET_BYTES = 4 << 30
# Inputs as held: float32, or uint8 pixels that read() scales.
Inputs = npt.NDArray[np.float32] | npt.NDArray[np.uint8]


def image_inputs(values: npt.NDArray[np.generic], where: str, input_size: int) -> Inputs:
    """`values` (n, ...) as (n, input_size): uint8 pixels as they are, anything else as finite
    float32; or DataError naming `where`."""
    if values.ndim < 1:
        raise DataError(f"{where}: inputs must have a sample axis, got shape {values.shape}")
    features = int(np.prod(values.shape[1:], dtype=np.int64))
    if features != input_size:
        raise DataError(
            f"{where}: each sample has {features} values (shape {values.shape[1:]}); "
            f"model.input_size is {input_size}"
        )
    flat = values.reshape(len(values), features)
    if values.dtype == np.uint8:
        return flat.astype(np.uint8, copy=False)
    if values.dtype not in (np.float32, np.float64):
        raise DataError(
            f"{where}: inputs have dtype {values.dtype}; use float32, float64 or uint8"
        )
    with np.errstate(over="ignore"):  # a float64 beyond float32's range: refused below
        inputs = flat.astype(np.float32, copy=False)  # float32 as read: no copy
    if not np.isfinite(inputs).all():
        bad = int(np.argmin(np.isfinite(inputs).all(axis=1)))
        raise DataError(f"{where}: sample {bad} has a NaN or infinite input (in float32)")
    return inputs


def class_labels(values: npt.NDArray[np.generic], where: str, num_classes: int) -> Labels:
    """`values` (n,) of an integer dtype, each in 0..num_classes-1, as int64."""
    if values.ndim != 1:
        raise DataError(f"{where}: labels must have shape (n,), got {values.shape}")
    if values.dtype.kind not in "iu":
        raise DataError(f"{where}: labels have dtype {values.dtype}; use an integer dtype")
    if len(values):
        low, high = int(values.min()), int(values.max())
        if low < 0 or high >= num_classes:
            bad = low if low < 0 else high
            raise DataError(
                f"{where}: label {bad} is out of range; model.num_classes is {num_classes}"
            )
    return values.astype(np.int64)


class InMemoryImages:
    """A data set of images and labels held in memory (the DataSet protocol)."""

    def __init__(self, name: str, inputs: Inputs, labels: Labels) -> None:
        self.name = name
        self._inputs = inputs
        self._labels = labels

    def __len__(self) -> int:
        return len(self._labels)

    def read(self, indices: npt.NDArray[np.int64]) -> Batch:
        """The samples `indices` (each in 0..len-1) as one batch, in that order."""
        return Batch(inputs=scaled(self._inputs[indices]), targets=self._labels[indices])


def scaled(inputs: Inputs) -> Array:
    """Inputs as float32: uint8 pixels scaled to [0, 1]."""
    if inputs.dtype != np.uint8:
        return inputs.astype(np.float32, copy=False)
    values = inputs.astype(np.float32)
    values /= np.float32(255.0)
    return values


def join(name: str, parts: list[tuple[Inputs, Labels]]) -> InMemoryImages:
    """One in-memory data set of the shards `parts`, in order (pixels stay bytes when every
    shard's are)."""
    held = [p[0] for p in parts]
    if len({a.dtype for a in held}) > 1:
        held = [scaled(a) for a in held]
    if len(held) == 1:  # as it is: a copy would double the set's memory while made
        inputs = held[0]
    else:
        inputs = cast(Inputs, np.concatenate(held) if held else np.zeros((0, 0), np.float32))
    labels = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
    return InMemoryImages(name, inputs, labels)
