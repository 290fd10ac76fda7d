"""GptHDF5DataProcessor: the Model Zoo's "preprocessed text" HDF5 shards for GPT models.

Each `*.h5` (or `*.hdf5`) file of data_dir, in name order, holds a dataset `data` of an integer
type and shape (n, 3, max_sequence_length): per sample its input_ids, its attention mask and its
labels (the input ids shifted by one token), and an attribute `n_examples` = n, as the Model
Zoo's create_hdf5_dataset.py writes them (int32, gzip'd chunks of one sample). Files with
another middle size (the variable-sequence-length layout of 5) are refused.

A batch is what the gpt2 model's own batches are: inputs = the input ids, targets = the labels,
both int64 of shape (n, L), L the job's sequence length (train_input.max_sequence_length, else
model.max_position_embeddings). This GPT has no attention mask: it trains on every position, so
a sample whose mask is not all ones (padding) is refused rather than trained on; so is an id or
label outside 0..vocab_size-1.

The structure of every file is checked at open (and `data` must be the file's own: an HDF5
link to another file, external storage or a virtual dataset would read other files with the
input worker's rights); the samples themselves as they are read (a data
set may be far larger than memory), so a bad sample fails the read that meets it, naming the
file and the sample. Files are opened as files.py opens them (no links, regular files only);
at most _OPEN_FILES stay open at once.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import threading
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import numpy.typing as npt

from appliance.domain.params import Gpt2Model
from appliance.workers.data import files
from appliance.workers.data.errors import DataError
from appliance.workers.data.order import MAX_SAMPLES
from appliance.workers.models.model import Batch

_SUFFIXES = (".h5", ".hdf5")
# Shards kept open: a shuffled batch reads a sample or two from each of many shards, so a data
# set of more shards than this reopens (and rechecks) one per sample read (a 16-sample batch
# of 35 shards: 9 ms with 16 kept open, 1.5 ms with all). An open file costs a descriptor and
# HDF5's chunk cache (at most 1 MiB).
_OPEN_FILES = 64
# The largest chunk of `data` read (a read decompresses whole chunks; the Model Zoo's hold one
# sample, h5py's automatic ones at most 1 MiB).
MAX_CHUNK_BYTES = 64 << 20
_FAULTS = (OSError, KeyError, ValueError, RuntimeError, TypeError)


@dataclasses.dataclass(frozen=True)
class _Shard:
    name: str
    first: int  # the data set's index of the shard's sample 0
    count: int


class GptHdf5Set:
    """The samples of a directory of preprocessed-text HDF5 shards (the DataSet protocol)."""

    def __init__(self, data_dir: Path, model: Gpt2Model, sequence_length: int) -> None:
        self.name = str(data_dir)
        self._dir = data_dir
        self._vocab = model.vocab_size
        self._length = sequence_length
        # Open shards, least recently read first: the file, its HDF5 handle and its `data`.
        self._open: collections.OrderedDict[str, tuple[Any, h5py.File, h5py.Dataset]] = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()
        shards: list[_Shard] = []
        with files.data_directory(data_dir) as folder:
            names = [n for n in files.entries(folder, data_dir) if n.endswith(_SUFFIXES)]
            if not names:
                raise DataError(f"data_dir {data_dir} holds no .h5 file (GptHDF5DataProcessor)")
            first = 0
            for name in names:
                stream, handle = self._open_shard(folder, name)
                try:
                    count = self._check(name, handle)
                finally:
                    handle.close()
                    stream.close()
                shards.append(_Shard(name, first, count))
                first += count
        self._shards = shards
        self._firsts = np.array([s.first for s in shards], dtype=np.int64)
        self._size = first

    def __len__(self) -> int:
        return self._size

    def read(self, indices: npt.NDArray[np.int64]) -> Batch:
        """The samples `indices`, in that order: input ids and labels, int64 (n, L)."""
        rows = np.asarray(indices, dtype=np.int64)
        if rows.ndim != 1 or (len(rows) and (rows.min() < 0 or rows.max() >= self._size)):
            raise IndexError(f"sample indices out of 0..{self._size - 1}")
        inputs = np.empty((len(rows), self._length), dtype=np.int64)
        targets = np.empty((len(rows), self._length), dtype=np.int64)
        owner = np.searchsorted(self._firsts, rows, side="right") - 1
        with self._lock:
            for shard_index in np.unique(owner):
                shard = self._shards[int(shard_index)]
                where = np.flatnonzero(owner == shard_index)
                local = rows[where] - shard.first
                wanted, back = np.unique(local, return_inverse=True)
                samples = self._rows(shard, wanted)[back]
                inputs[where] = samples[:, 0]
                targets[where] = samples[:, 2]
        return Batch(inputs=inputs, targets=targets)

    def close(self) -> None:
        """Close the files kept open."""
        with self._lock:
            while self._open:
                _, (stream, handle, _) = self._open.popitem()
                handle.close()
                stream.close()

    def _rows(self, shard: _Shard, wanted: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Samples `wanted` (sorted, unique) of `shard`, checked, as int64 (k, 3, L)."""
        where = self._dir / shard.name
        data = self._data(shard)
        try:
            samples = np.asarray(data[wanted.tolist()], dtype=np.int64)
        except _FAULTS as exc:
            raise DataError(f"{where} cannot be read: {_first_line(exc)}") from None
        masks = samples[:, 1]
        if not (masks == 1).all():
            bad = int(wanted[np.argmin((masks == 1).all(axis=1))])
            raise DataError(
                f"{where}: sample {bad} is padded (its attention mask is not all ones); this "
                "GPT has no attention mask and would train on the padding: write full "
                "sequences (`appliance data preprocess text` does)"
            )
        for column, what in ((0, "an input id"), (2, "a label")):
            values = samples[:, column]
            if values.min() < 0 or values.max() >= self._vocab:
                bad_row = int(wanted[np.argmax(((values < 0) | (values >= self._vocab)).any(1))])
                raise DataError(
                    f"{where}: sample {bad_row} has {what} out of 0..{self._vocab - 1} "
                    "(model.vocab_size)"
                )
        return samples

    def _data(self, shard: _Shard) -> h5py.Dataset:
        """The `data` of `shard`'s open file (opened anew, and checked again, when not kept
        open)."""
        if shard.name in self._open:
            self._open.move_to_end(shard.name)
            return self._open[shard.name][2]
        with files.data_directory(self._dir) as folder:
            stream, handle = self._open_shard(folder, shard.name)
        if self._check(shard.name, handle) != shard.count:
            handle.close()
            stream.close()
            raise DataError(f"{self._dir / shard.name} changed while the job read it")
        data = handle["data"]  # looked up once an opening: a lookup costs a fifth of a read
        self._open[shard.name] = (stream, handle, data)
        if len(self._open) > _OPEN_FILES:
            _, (old_stream, old, _) = self._open.popitem(last=False)
            old.close()
            old_stream.close()
        return data

    def _open_shard(self, folder: int, name: str) -> tuple[Any, h5py.File]:
        fd, _ = files.open_file(folder, name, self._dir)
        stream = os.fdopen(fd, "rb")
        try:
            return stream, h5py.File(stream, "r")
        except _FAULTS as exc:
            stream.close()
            raise DataError(
                f"{self._dir / name} is not a readable HDF5 file: {_first_line(exc)}"
            ) from None

    def _check(self, name: str, handle: h5py.File) -> int:
        """The shard's sample count, once its layout is checked."""
        where = self._dir / name
        try:
            link = handle.get("data", getlink=True)
            data = handle.get("data") if isinstance(link, h5py.HardLink) else None
            if link is not None and not isinstance(link, h5py.HardLink):
                raise DataError(
                    f"{where}: 'data' is a link elsewhere (an HDF5 soft or external link)"
                )
            if not isinstance(data, h5py.Dataset):
                raise DataError(f"{where} has no dataset 'data' (the Model Zoo's layout)")
            if data.external or data.is_virtual:
                # Its values would be read from other files, with the input worker's rights.
                raise DataError(f"{where}: 'data' keeps its values in other files; refused")
            shape, dtype, chunks = tuple(data.shape), data.dtype, data.chunks
            claimed = handle.attrs.get("n_examples")
        except _FAULTS as exc:
            raise DataError(f"{where} cannot be read: {_first_line(exc)}") from None
        if len(shape) != 3 or shape[1] != 3:
            raise DataError(
                f"{where}: 'data' has shape {shape}; the layout is (n, 3, max_sequence_length)"
                " (input ids, attention mask, labels)"
            )
        if dtype.kind not in "iu":
            raise DataError(f"{where}: 'data' has dtype {dtype}; token ids are integers")
        if shape[2] != self._length:
            raise DataError(
                f"{where}: its sequences have {shape[2]} tokens; the job's max_sequence_length "
                f"is {self._length}"
            )
        if shape[0] == 0:
            raise DataError(f"{where} holds no samples")
        chunk_bytes = math.prod(chunks or ()) * dtype.itemsize
        if chunk_bytes > MAX_CHUNK_BYTES:  # each read decompresses a whole chunk
            raise DataError(
                f"{where}: 'data' is stored in chunks of {chunk_bytes} bytes, more than "
                f"{MAX_CHUNK_BYTES}; write chunks of one sample, as the Model Zoo does"
            )
        if shape[0] > MAX_SAMPLES:  # a chunked dataset claims any count in a few bytes
            raise DataError(
                f"{where}: 'data' claims {shape[0]} samples, more than {MAX_SAMPLES} in one file"
            )
        if claimed is not None and not (
            isinstance(claimed, int | np.integer) and int(claimed) == shape[0]
        ):
            raise DataError(
                f"{where}: attribute n_examples is {_shown(claimed)}, 'data' has {shape[0]}"
            )
        return int(shape[0])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _shown(value: object) -> str:
    """An attribute's value as a user wrote it (3, not np.int64(3)), cut short."""
    text = repr(value.item() if isinstance(value, np.generic) else value)
    return text if len(text) <= 40 else text[:37] + "..."
