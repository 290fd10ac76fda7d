"""NumpyDataProcessor: every `*.npz` in data_dir, in name order, each a shard with `inputs`
(float32, float64 or uint8; shape (n, input_size) or (n, ...) flattening to it) and `labels`
(an integer dtype, shape (n,)).

An .npz is a zip of .npy arrays: each member is read bounded (at most its .npy header's promise
plus one byte, and the header's promise at most MAX_SET_BYTES) and parsed with numpy's own
format reader, no pickles, so neither a zip bomb nor a header claiming a huge shape is believed.
"""

from __future__ import annotations

import math
import os
import zipfile
from pathlib import Path
from typing import IO

import numpy as np
import numpy.typing as npt

from appliance.domain.params import FcMnistModel
from appliance.workers.data import arrays, files
from appliance.workers.data.errors import DataError

_MEMBERS = ("inputs", "labels")
_PIECE = 1 << 20


def open_numpy_set(data_dir: Path, model: FcMnistModel) -> arrays.InMemoryImages:
    """The .npz shards of `data_dir` as one in-memory data set."""
    parts = []
    total = 0
    with files.data_directory(data_dir) as folder:
        names = [n for n in files.entries(folder, data_dir) if n.endswith(".npz")]
        if not names:
            raise DataError(f"data_dir {data_dir} holds no .npz file (NumpyDataProcessor)")
        for name in names:
            where = str(data_dir / name)
            fd, _ = files.open_file(folder, name, data_dir)
            with os.fdopen(fd, "rb") as stream:  # members read from it, not the whole file
                members = read_npz(stream, where)
            inputs = arrays.image_inputs(members["inputs"], where, model.input_size)
            labels = arrays.class_labels(members["labels"], where, model.num_classes)
            if len(inputs) != len(labels):
                raise DataError(
                    f"{where}: {len(inputs)} inputs but {len(labels)} labels; they must be as many"
                )
            if not len(labels):
                raise DataError(f"{where} holds no samples")
            total += inputs.nbytes
            if total > arrays.MAX_SET_BYTES:
                raise DataError(
                    f"{where}: the data set passes {arrays.MAX_SET_BYTES} bytes of inputs"
                )
            parts.append((inputs, labels))
    return arrays.join(str(data_dir), parts)


def read_npz(data: IO[bytes], where: str) -> dict[str, npt.NDArray[np.generic]]:
    """The arrays `inputs` and `labels` of the .npz in the file `data`, or DataError naming
    `where`."""
    try:
        archive = zipfile.ZipFile(data)
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise DataError(f"{where} is not an .npz (a zip archive): {exc}") from None
    with archive:
        present = {info.filename.removesuffix(".npy"): info for info in archive.infolist()}
        missing = [m for m in _MEMBERS if m not in present]
        if missing:
            raise DataError(f"{where} has no array '{missing[0]}'; it needs inputs and labels")
        return {m: _member(archive, present[m], where) for m in _MEMBERS}


def _member(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, where: str
) -> npt.NDArray[np.generic]:
    name = info.filename.removesuffix(".npy")
    try:
        with archive.open(info) as stream:
            version = np.lib.format.read_magic(stream)
            shape, fortran, dtype = _header(stream, version)
            if dtype.hasobject:
                raise DataError(f"{where}: array '{name}' holds Python objects; not read")
            count = math.prod(shape)  # Python ints: a hostile header cannot wrap
            size = count * dtype.itemsize
            if size > arrays.MAX_SET_BYTES:
                raise DataError(f"{where}: array '{name}' claims {shape}, too large to read")
            body = np.empty(size, dtype=np.uint8)
            have = _read_into(stream, body)
            have += len(stream.read(1))  # nothing may follow
    except DataError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, RuntimeError) as exc:
        raise DataError(f"{where}: array '{name}' cannot be read: {exc}") from None
    if have != size:
        raise DataError(
            f"{where}: array '{name}' has {have} bytes of data, its header says {size}"
        )
    return body.view(dtype).reshape(shape, order="F" if fortran else "C")


def _read_into(stream: IO[bytes], buffer: npt.NDArray[np.uint8]) -> int:
    """Fill `buffer` from `stream` a piece at a time (one read of it all would hold the data
    twice); how many bytes came."""
    view = buffer.data  # a memoryview of its bytes
    got = 0
    while got < len(view):
        piece = stream.read(min(_PIECE, len(view) - got))
        if not piece:
            break
        view[got : got + len(piece)] = piece
        got += len(piece)
    return got


def _header(stream: IO[bytes], version: tuple[int, int]) -> tuple[tuple[int, ...], bool, np.dtype]:
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(stream)
    if version in ((2, 0), (3, 0)):
        return np.lib.format.read_array_header_2_0(stream)
    raise ValueError(f"npy format version {version} is not known")
