"""MNISTDataProcessor reads the IDX files as published: a file built here byte by byte from the
format's description, gzip'd or not, directly in data_dir or under MNIST/raw; every hostile
file is a DataError naming it, refused before anything large is read or allocated."""

from __future__ import annotations

import gzip
import os
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from appliance.domain.params import Params, parse_params
from appliance.workers.data.dataset import DataError, DataSet, open_data_set
from appliance.workers.data.idx import idx_bytes


def _params(data_dir: Path, input_size: int = 4, num_classes: int = 10) -> Params:
    section = {"data_dir": str(data_dir), "batch_size": 1}
    return parse_params(
        {
            "model": {"name": "fc_mnist", "input_size": input_size, "num_classes": num_classes},
            "train_input": section,
            "eval_input": dict(section),
        }
    )


def _open(data_dir: Path, training: bool = True, **model: int) -> DataSet:
    params = _params(data_dir, **model)
    section = params.train_input if training else params.eval_input
    return open_data_set(section, params)


# Three 2x2 images and their labels, as the format's description lays them out: the magic
# number 00 00 08 <dims> (08: unsigned byte), each size 4 bytes big-endian, then the bytes.
IMAGES = bytes([0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2]) + bytes(
    [0, 255, 51, 102, 255, 255, 255, 255, 0, 0, 0, 0]
)
LABELS = bytes([0, 0, 8, 1, 0, 0, 0, 3]) + bytes([7, 1, 9])


def _pair(folder: Path, prefix: str = "train", images: bytes = IMAGES, labels: bytes = LABELS):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{prefix}-images-idx3-ubyte").write_bytes(images)
    (folder / f"{prefix}-labels-idx1-ubyte").write_bytes(labels)


def test_a_file_built_from_the_format_description_is_read(tmp_path: Path) -> None:
    _pair(tmp_path)
    data = _open(tmp_path)
    assert len(data) == 3
    batch = data.read(np.array([0, 2], np.int64))
    assert batch.inputs.dtype == np.float32 and batch.inputs.shape == (2, 4)
    np.testing.assert_allclose(batch.inputs[0], [0.0, 1.0, 0.2, 0.4], rtol=1e-6)
    assert batch.targets.dtype == np.int64 and batch.targets.tolist() == [7, 9]


def test_our_writer_writes_the_bytes_the_format_describes() -> None:
    images = np.frombuffer(IMAGES[16:], np.uint8).reshape(3, 2, 2)
    assert idx_bytes(images) == IMAGES
    assert idx_bytes(np.array([7, 1, 9], np.uint8)) == LABELS
    assert idx_bytes(np.array([1, -2], np.int32)) == bytes(
        [0, 0, 0x0C, 1, 0, 0, 0, 2]
    ) + struct.pack(">2i", 1, -2)


def test_gzipd_files_under_mnist_raw_train_and_t10k_for_each_section(tmp_path: Path) -> None:
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name, body in (("train-images-idx3-ubyte", IMAGES), ("train-labels-idx1-ubyte", LABELS)):
        (raw / f"{name}.gz").write_bytes(gzip.compress(body))
    t10k = bytes([0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 2, 1, 2, 3, 4])
    _pair(raw, "t10k", t10k, bytes([0, 0, 8, 1, 0, 0, 0, 1, 5]))
    assert len(_open(tmp_path, training=True)) == 3
    evaluation = _open(tmp_path, training=False)
    assert len(evaluation) == 1 and evaluation.read(np.array([0])).targets.tolist() == [5]


def test_a_single_pair_of_any_prefix_serves_either_section(tmp_path: Path) -> None:
    _pair(tmp_path, "digits")
    assert len(_open(tmp_path, training=False)) == 3
    _pair(tmp_path, "more")
    with pytest.raises(DataError, match=r"holds no t10k-images.*pairs found: digits, more"):
        _open(tmp_path, training=False)


def _refused(tmp_path: Path, said: str, name: str = "train-images-idx3-ubyte", **kw: int) -> None:
    with pytest.raises(DataError, match=said) as caught:
        _open(tmp_path, **kw)
    assert str(tmp_path / name) in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("images", "said"),
    [
        (b"\x01\x00\x08\x03" + IMAGES[4:], "is not an IDX file"),
        (b"\x00\x00\x07\x03" + IMAGES[4:], "is not an IDX file"),
        (b"\x00\x00\x08\x09" + IMAGES[4:], "of 9 dimensions"),
        (IMAGES[:10], "is truncated in its sizes"),
        (IMAGES[:-1], "is truncated: 11 bytes of data"),
        (IMAGES + b"\0", "has bytes after its data"),
        (b"", "is truncated in its magic"),
        (IMAGES[:2] + b"\x0d" + IMAGES[3:16] + b"\0" * 48, "images must be unsigned bytes"),
        (bytes([0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2]) + b"\0" * 8, "2 images but"),
        (bytes([0, 0, 8, 3, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 2]), "0 images but"),
        (bytes([0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0, 1]) + b"\0" * 9, "input_size is 4"),
        (bytes([0, 0, 8, 4]) + struct.pack(">4I", *[1 << 16] * 4), "claims a shape"),  # 2**64
    ],
)
def test_a_bad_images_file_is_refused_naming_it(tmp_path: Path, images: bytes, said: str) -> None:
    _pair(tmp_path, images=images)
    _refused(tmp_path, said)


def test_labels_out_of_range_are_refused(tmp_path: Path) -> None:
    _pair(tmp_path)
    _refused(tmp_path, "label 9 is out of range", "train-labels-idx1-ubyte", num_classes=9)


def test_a_zero_sample_pair_is_refused(tmp_path: Path) -> None:
    empty = bytes([0, 0, 8, 3, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 2])
    _pair(tmp_path, images=empty, labels=bytes([0, 0, 8, 1, 0, 0, 0, 0]))
    _refused(tmp_path, "holds no samples")


def test_a_header_claiming_ten_gigabytes_is_refused_unread(tmp_path: Path) -> None:
    huge = bytes([0, 0, 8, 3]) + struct.pack(">3I", 12_755_102, 28, 28) + b"\0" * 784
    _pair(tmp_path, images=huge)
    _refused(tmp_path, r"claims a shape \(12755102, 28, 28\) \(9999999968 bytes\)")
    _pair(tmp_path, images=b"")
    (tmp_path / "train-images-idx3-ubyte").unlink()
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(huge))
    _refused(tmp_path, "9999999968 bytes", "train-images-idx3-ubyte.gz")


def test_a_gzip_bomb_is_decompressed_no_further_than_the_header_promises(tmp_path: Path) -> None:
    # 3 images of 2x2, then 256 MB of zeros the header does not mention (a 250 kB file).
    bomb = gzip.compress(IMAGES + bytes(256 << 20), compresslevel=9)
    assert len(bomb) < 1 << 20
    _pair(tmp_path, images=b"")
    (tmp_path / "train-images-idx3-ubyte").unlink()
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(bomb)
    _refused(tmp_path, "has bytes after its data", "train-images-idx3-ubyte.gz")


def test_a_corrupt_or_truncated_gzip_is_refused(tmp_path: Path) -> None:
    _pair(tmp_path, images=b"")
    (tmp_path / "train-images-idx3-ubyte").unlink()
    packed = gzip.compress(IMAGES)
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(packed[:-12])
    _refused(tmp_path, "cannot be read|truncated", "train-images-idx3-ubyte.gz")
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b" + b"junk" * 10)
    _refused(tmp_path, "cannot be read", "train-images-idx3-ubyte.gz")


def test_a_fifo_or_a_link_under_an_idx_name_is_refused(tmp_path: Path) -> None:
    _pair(tmp_path / "elsewhere")
    data_dir = tmp_path / "data"
    _pair(data_dir)
    (data_dir / "train-images-idx3-ubyte").unlink()
    os.mkfifo(data_dir / "train-images-idx3-ubyte")
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte is not a regular file \(a FIFO"):
        _open(data_dir)
    (data_dir / "train-images-idx3-ubyte").unlink()
    (data_dir / "train-images-idx3-ubyte").symlink_to(
        tmp_path / "elsewhere" / "train-images-idx3-ubyte"
    )
    with pytest.raises(DataError, match="train-images-idx3-ubyte is a symbolic link"):
        _open(data_dir)


def test_a_linked_mnist_raw_is_refused(tmp_path: Path) -> None:
    _pair(tmp_path / "elsewhere" / "raw")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "MNIST").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(DataError, match="MNIST is a symbolic link"):
        _open(tmp_path / "data")


def test_the_pixels_are_held_as_the_bytes_they_are_and_scaled_as_read(tmp_path: Path) -> None:
    # 1 GiB of pixels (the most an IDX file may hold) became 4 GiB of float32 in every input
    # worker, after a peak of 9 times the file (three float32 copies): two workers of one job
    # exhausted a 24 GB node. Now the set costs its bytes, each batch scaled as it is read.
    pixels = np.random.default_rng(0).integers(0, 256, (8192, 28, 28), dtype=np.uint8)
    _pair(tmp_path, images=idx_bytes(pixels), labels=idx_bytes(np.zeros(8192, np.uint8)))
    tracemalloc.start()
    try:
        data = _open(tmp_path, input_size=784)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2.5 * pixels.nbytes, f"opening took {peak / pixels.nbytes:.1f}x the pixels"
    rows = np.array([5, 0, 8191, 5], np.int64)
    expected = pixels[rows].reshape(4, 784).astype(np.float32) / np.float32(255.0)
    got = data.read(rows).inputs
    assert got.dtype == np.float32 and np.array_equal(got, expected)  # bitwise, as before
