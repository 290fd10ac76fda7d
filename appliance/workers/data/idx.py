"""The IDX format the MNIST files are published in, read with NumPy and bounded.

A file is a 4-byte magic number `00 00 <type> <ndim>`, then `ndim` sizes as 4-byte big-endian
unsigned integers, then the data: the sizes' product of values of the type (08 unsigned byte,
09 signed byte, 0B 2-byte, 0C 4-byte integer, 0D 4-byte float, 0E 8-byte float; multi-byte
values big-endian), C order. Files ending in `.gz` are gzip'd. The header is checked first:
a known type, 1 to 4 dimensions, and a data size at most MAX_IDX_BYTES, before anything is
allocated; then exactly that many bytes must follow (a truncated file and trailing bytes are
both refused), and a gzip'd file is never decompressed past the header's promise plus one byte.
"""

from __future__ import annotations

import gzip
import math
import os
import struct
import zlib
from pathlib import Path
from typing import IO

import numpy as np
import numpy.typing as npt

from appliance.workers.data import files
from appliance.workers.data.errors import DataError

# Type codes of the third magic byte and the values they stand for (big-endian).
IDX_TYPES: dict[int, np.dtype[np.generic]] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
MAX_DIMENSIONS = 4
# The most data one IDX file may hold (MNIST's training images are 47 MB).
MAX_IDX_BYTES = 1 << 30


def read_idx(folder: int, name: str, path: Path) -> npt.NDArray[np.generic]:
    """The array of the IDX file `name` in the directory `folder` (which is `path`)."""
    where = path / name
    fd, _ = files.open_file(folder, name, path)
    try:
        with os.fdopen(fd, "rb") as raw:
            if name.endswith(".gz"):
                with gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
                    return _parse(unzipped, where)
            return _parse(raw, where)
    except DataError:
        raise
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{where} cannot be read: {_cause(exc)}") from None


def idx_bytes(values: npt.NDArray[np.generic]) -> bytes:
    """`values` as an IDX file (the writer of `appliance data`); its dtype must be one of
    IDX_TYPES' (in any byte order)."""
    codes = {dtype.newbyteorder("="): code for code, dtype in IDX_TYPES.items()}
    dtype = values.dtype.newbyteorder("=")
    if dtype not in codes or not 1 <= values.ndim <= MAX_DIMENSIONS:
        raise ValueError(f"IDX holds no {values.dtype} array of {values.ndim} dimensions")
    header = bytes([0, 0, codes[dtype], values.ndim]) + struct.pack(
        f">{values.ndim}I", *values.shape
    )
    return header + np.ascontiguousarray(values, dtype=dtype.newbyteorder(">")).tobytes()


def _parse(stream: IO[bytes] | gzip.GzipFile, where: Path) -> npt.NDArray[np.generic]:
    magic = _exactly(stream, 4, where, "magic number")
    if magic[:2] != b"\0\0" or magic[2] not in IDX_TYPES:
        raise DataError(f"{where} is not an IDX file (magic number {magic.hex()})")
    ndim = magic[3]
    if not 1 <= ndim <= MAX_DIMENSIONS:
        raise DataError(f"{where}: an IDX file of {ndim} dimensions; at most {MAX_DIMENSIONS}")
    shape = struct.unpack(f">{ndim}I", _exactly(stream, 4 * ndim, where, "sizes"))
    dtype = IDX_TYPES[magic[2]]
    want = math.prod(shape) * dtype.itemsize  # Python ints: a hostile header cannot wrap
    if want > MAX_IDX_BYTES:
        raise DataError(
            f"{where}: its header claims a shape {shape} ({want} bytes), more than "
            f"{MAX_IDX_BYTES}; refused unread"
        )
    body = stream.read(want + 1)
    if len(body) != want:
        raise DataError(_mismatch(where, len(body), want, shape))
    return np.frombuffer(body, dtype=dtype).reshape(shape)


def _exactly(stream: IO[bytes] | gzip.GzipFile, count: int, where: Path, what: str) -> bytes:
    data = stream.read(count)
    if len(data) != count:
        raise DataError(f"{where} is truncated in its {what} (not an IDX file?)")
    return data


def _mismatch(where: Path, have: int, want: int, shape: tuple[int, ...]) -> str:
    if have < want:
        return f"{where} is truncated: {have} bytes of data, its header {shape} says {want}"
    return f"{where} has bytes after its data: its header {shape} says {want} bytes"


def _cause(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0] if text else "unreadable"
