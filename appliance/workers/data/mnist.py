"""MNISTDataProcessor: the MNIST files as published, in the IDX format (idx.py).

Where the files are: directly in data_dir, or (when data_dir holds none) under
data_dir/MNIST/raw as torchvision lays them out. Their names: `<prefix>-images-idx3-ubyte` and
`<prefix>-labels-idx1-ubyte` (a `.` for the `-` before `idx` is accepted too, as some copies
spell it), each gzip'd (`.gz`) or not; when both are there the uncompressed one is read (as
torchvision leaves them). Which pair: `train` for train_input and `t10k` for eval_input, as
published; a directory holding a single pair of any prefix gives that pair to either section.

The images must be unsigned bytes (pixels scaled to float32 in [0, 1]) with as many values as
model.input_size; the labels an integer type, as many as the images, each < model.num_classes.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

from appliance.domain.params import FcMnistModel
from appliance.workers.data import arrays, files
from appliance.workers.data.errors import DataError
from appliance.workers.data.idx import read_idx

_NAME = re.compile(
    r"(?P<prefix>.+)-(?P<kind>images|labels)[-.]idx(?P<ndim>[13])-ubyte(?P<gz>\.gz)?"
)
_PUBLISHED = {True: "train", False: "t10k"}


def open_mnist_set(data_dir: Path, model: FcMnistModel, training: bool) -> arrays.InMemoryImages:
    """The images and labels of the pair of IDX files `training` selects in `data_dir`."""
    with _files_folder(data_dir) as (folder, where, names):
        pairs = _pairs(names)
        wanted = _PUBLISHED[training]
        if wanted in pairs:
            prefix = wanted
        elif len(pairs) == 1:
            prefix = next(iter(pairs))
        else:
            found = ", ".join(sorted(pairs)) or "none"
            raise DataError(
                f"data_dir {data_dir} holds no {wanted}-images-idx3-ubyte and "
                f"{wanted}-labels-idx1-ubyte (MNISTDataProcessor); pairs found: {found}"
            )
        images_name, labels_name = pairs[prefix]
        images = read_idx(folder, images_name, where)
        labels = read_idx(folder, labels_name, where)
    images_at, labels_at = str(where / images_name), str(where / labels_name)
    if images.dtype.kind != "u" or images.dtype.itemsize != 1 or images.ndim < 2:
        raise DataError(
            f"{images_at}: images must be unsigned bytes of shape (n, rows, columns), "
            f"got {images.dtype.str} {images.shape}"
        )
    inputs = arrays.image_inputs(images, images_at, model.input_size)
    targets = arrays.class_labels(labels, labels_at, model.num_classes)
    if len(inputs) != len(targets):
        raise DataError(
            f"{images_at} holds {len(inputs)} images but {labels_at} {len(targets)} labels"
        )
    if not len(targets):
        raise DataError(f"{images_at} holds no samples")
    return arrays.InMemoryImages(str(data_dir), inputs, targets)


@contextlib.contextmanager
def _files_folder(data_dir: Path) -> Iterator[tuple[int, Path, list[str]]]:
    """The directory holding the IDX files: data_dir, or data_dir/MNIST/raw when data_dir
    holds none; its descriptor, path and entries."""
    with files.data_directory(data_dir) as top:
        names = files.entries(top, data_dir)
        if _pairs(names) or "MNIST" not in names:
            yield top, data_dir, names
            return
        mnist = files.subdirectory(top, "MNIST", data_dir)
        raw = None
        if mnist is not None:
            try:
                raw = files.subdirectory(mnist, "raw", data_dir / "MNIST")
            finally:
                os.close(mnist)
        if raw is None:
            yield top, data_dir, names
            return
        try:
            where = data_dir / "MNIST" / "raw"
            yield raw, where, files.entries(raw, where)
        finally:
            os.close(raw)


def _pairs(names: list[str]) -> dict[str, tuple[str, str]]:
    """prefix -> (images file, labels file), for the prefixes with both (plain over .gz)."""
    found: dict[tuple[str, str], str] = {}
    for name in names:
        match = _NAME.fullmatch(name)
        if match is None or (match["kind"] == "images") != (match["ndim"] == "3"):
            continue
        key = (match["prefix"], match["kind"])
        if key not in found or not match["gz"]:
            found[key] = name
    return {
        prefix: (found[(prefix, "images")], found[(prefix, "labels")])
        for prefix, kind in found
        if kind == "images" and (prefix, "labels") in found
    }
