"""NumpyDataProcessor: every `*.npz` in data_dir, in name order, each a shard with `inputs`
(float32, float64 or uint8; shape (n, input_size) or (n, ...) flattening to it) and `labels`
(an integer dtype, shape (n,)).

An .npz is a zip of .npy arrays: each member is read bounded (at most its .npy header's promise
plus one byte, and the header's promise at most MAX_SET_BYTES) and parsed with numpy's own
format reader, no pickles, so neither a zip bomb nor a header claiming a huge shape is believed.
"""

from __future__ import annotations

import io
import math
import zipfile
from pathlib import Path
from typing import IO

import numpy as np
import numpy.typing as npt

from appliance.domain.params import FcMnistModel
from appliance.workers.data import arrays, files
from appliance.workers.data.errors import DataError

_MEMBERS = ("inputs", "labels")


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
            members = read_npz(files.read_file(folder, name, data_dir), where)
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


def read_npz(data: bytes, where: str) -> dict[str, npt.NDArray[np.generic]]:
    """The arrays `inputs` and `labels` of the .npz `data`, or DataError naming `where`."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
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
            body = stream.read(size + 1)
    except DataError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, RuntimeError) as exc:
        raise DataError(f"{where}: array '{name}' cannot be read: {exc}") from None
    if len(body) != size:
        raise DataError(
            f"{where}: array '{name}' has {len(body)} bytes of data, its header says {size}"
        )
    values = np.frombuffer(body, dtype=dtype, count=count)
    return values.reshape(shape, order="F" if fortran else "C")


def _header(stream: IO[bytes], version: tuple[int, int]) -> tuple[tuple[int, ...], bool, np.dtype]:
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(stream)
    if version in ((2, 0), (3, 0)):
        return np.lib.format.read_array_header_2_0(stream)
    raise ValueError(f"npy format version {version} is not known")
