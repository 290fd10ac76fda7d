"""NumpyDataProcessor: every .npz of data_dir in name order, checked against the model; each
hostile shard a DataError naming the file (real .npz files written by numpy)."""

from __future__ import annotations

import os
import struct
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from appliance.domain.params import Params, parse_params
from appliance.workers.data.dataset import DataError, open_data_set


def _params(data_dir: Path, input_size: int = 4, num_classes: int = 3) -> Params:
    return parse_params(
        {
            "model": {"name": "fc_mnist", "input_size": input_size, "num_classes": num_classes},
            "train_input": {"data_dir": str(data_dir), "data_processor": "NumpyDataProcessor"},
        }
    )


def _open(data_dir: Path, **model: int) -> object:
    params = _params(data_dir, **model)
    return open_data_set(params.train_input, params)


def _shard(path: Path, inputs: npt.ArrayLike, labels: npt.ArrayLike) -> None:
    np.savez(path, inputs=np.asarray(inputs), labels=np.asarray(labels))


def test_shards_are_read_in_name_order_as_float32_rows_and_int64_labels(tmp_path: Path) -> None:
    _shard(tmp_path / "b.npz", np.full((2, 2, 2), 255, np.uint8), np.array([2, 2], np.uint8))
    np.savez_compressed(
        tmp_path / "a.npz", inputs=np.arange(12, dtype=np.float64).reshape(3, 4), labels=[0, 1, 2]
    )
    (tmp_path / "notes.txt").write_text("not a shard\n")
    params = _params(tmp_path)
    data = open_data_set(params.train_input, params)
    assert len(data) == 5
    batch = data.read(np.array([4, 0, 2], np.int64))
    assert batch.inputs.dtype == np.float32 and batch.inputs.shape == (3, 4)
    assert batch.targets.dtype == np.int64 and batch.targets.tolist() == [2, 0, 2]
    assert batch.inputs[0].tolist() == [1.0] * 4  # uint8 255 scaled to 1
    assert batch.inputs[1].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_the_default_processor_of_fc_mnist_is_not_numpy(tmp_path: Path) -> None:
    _shard(tmp_path / "a.npz", np.zeros((2, 4), np.float32), [0, 1])
    params = parse_params({"model": {"name": "fc_mnist"}, "train_input": {"data_dir": "/x"}})
    assert params.train_input.data_processor is None  # the model's first: MNISTDataProcessor


@pytest.mark.parametrize(
    ("inputs", "labels", "said"),
    [
        (np.array([[0.0, np.nan, 0, 0]], np.float32), [0], "NaN or infinite"),
        (np.array([[0.0, 1e300, 0, 0]]), [0], "NaN or infinite"),
        (np.zeros((1, 4), np.float32), [3], "label 3 is out of range"),
        (np.zeros((1, 4), np.float32), [-1], "label -1 is out of range"),
        (np.zeros((1, 4), np.float32), [0.0], "labels have dtype float64"),
        (np.zeros((1, 4), np.float32), [[0]], r"labels must have shape \(n,\)"),
        (np.zeros((1, 4), np.int32), [0], "inputs have dtype int32"),
        (np.zeros((1, 5), np.float32), [0], "model.input_size is 4"),
        (np.zeros((2, 4), np.float32), [0], "2 inputs but 1 labels"),
        (np.zeros((0, 4), np.float32), np.zeros(0, np.int64), "holds no samples"),
    ],
)
def test_a_bad_shard_is_refused_naming_it(
    tmp_path: Path, inputs: npt.ArrayLike, labels: npt.ArrayLike, said: str
) -> None:
    _shard(tmp_path / "ok.npz", np.zeros((1, 4), np.float32), [0])
    _shard(tmp_path / "bad.npz", inputs, labels)
    with pytest.raises(DataError, match=said) as caught:
        _open(tmp_path)
    assert str(tmp_path / "bad.npz") in str(caught.value)


def test_a_missing_array_and_a_file_that_is_no_zip_are_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "a.npz", inputs=np.zeros((1, 4), np.float32))
    with pytest.raises(DataError, match=r"a.npz has no array 'labels'"):
        _open(tmp_path)
    (tmp_path / "a.npz").write_bytes(b"\x93NUMPY not a zip")
    with pytest.raises(DataError, match=r"a.npz is not an .npz"):
        _open(tmp_path)


def test_a_truncated_array_is_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "a.npz", inputs=np.zeros((100, 4), np.float32), labels=np.zeros(100, int))
    with zipfile.ZipFile(tmp_path / "a.npz") as archive:
        body = archive.read("inputs.npy")
    with zipfile.ZipFile(tmp_path / "a.npz", "w") as archive:
        archive.writestr("inputs.npy", body[:-8])
        archive.writestr("labels.npy", _npy(np.zeros(100, np.int64)))
    with pytest.raises(DataError, match=r"a.npz: array 'inputs' has 1592 bytes of data"):
        _open(tmp_path)


def test_a_header_claiming_a_huge_array_is_refused_before_reading(tmp_path: Path) -> None:
    huge = "{'descr': '<f4', 'fortran_order': False, 'shape': (10000000000, 4), }"
    header = huge.ljust(118) + "\n"
    member = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + b"\0" * 16
    with zipfile.ZipFile(tmp_path / "a.npz", "w") as archive:
        archive.writestr("inputs.npy", member)
        archive.writestr("labels.npy", _npy(np.zeros(1, np.int64)))
    with pytest.raises(DataError, match=r"a.npz: array 'inputs' claims .*too large"):
        _open(tmp_path)


def test_a_header_whose_size_wraps_a_64_bit_product_is_refused(tmp_path: Path) -> None:
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }"
    member = b"\x93NUMPY\x01\x00" + struct.pack("<H", 118) + header.ljust(117).encode() + b"\n"
    with zipfile.ZipFile(tmp_path / "a.npz", "w") as archive:
        archive.writestr("inputs.npy", member)
        archive.writestr("labels.npy", _npy(np.zeros(1, np.int64)))
    with pytest.raises(DataError, match=r"a.npz: array 'inputs' claims .*too large"):
        _open(tmp_path)


def test_an_object_array_is_never_unpickled(tmp_path: Path) -> None:
    with zipfile.ZipFile(tmp_path / "a.npz", "w") as archive:
        archive.writestr("inputs.npy", _npy(np.array([[object()] * 4], dtype=object)))
        archive.writestr("labels.npy", _npy(np.zeros(1, np.int64)))
    with pytest.raises(DataError, match=r"holds Python objects"):
        _open(tmp_path)


def test_a_fifo_a_symlink_and_a_device_named_like_a_shard_are_refused(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere.npz"
    _shard(real, np.zeros((1, 4), np.float32), [0])
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    os.mkfifo(data_dir / "a.npz")  # nobody writes: a blocking open would hang
    with pytest.raises(DataError, match=r"a.npz is not a regular file \(a FIFO\)"):
        _open(data_dir)
    os.unlink(data_dir / "a.npz")
    (data_dir / "a.npz").symlink_to(real)
    with pytest.raises(DataError, match=r"a.npz is a symbolic link"):
        _open(data_dir)
    os.unlink(data_dir / "a.npz")
    os.symlink("/dev/null", data_dir / "null.npz")
    with pytest.raises(DataError, match=r"null.npz is a symbolic link"):
        _open(data_dir)


def test_a_missing_data_dir_an_empty_one_and_a_linked_one_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"missing does not exist"):
        _open(tmp_path / "missing")
    with pytest.raises(DataError, match=r"holds no .npz file"):
        _open(tmp_path)
    (tmp_path / "link").symlink_to(tmp_path)
    with pytest.raises(DataError, match=r"link is not a directory.*symbolic link"):
        _open(tmp_path / "link")


def _npy(array: npt.NDArray[np.generic]) -> bytes:
    import io

    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def test_a_shard_is_read_with_little_more_memory_than_its_inputs(tmp_path: Path) -> None:
    # The whole file was read into memory, then each array out of it, then the float32
    # inputs copied: 3.2 times the shard at its peak (13 GB for the 4 GiB allowed) in every
    # input worker.
    inputs = np.random.default_rng(0).random((4096, 784), dtype=np.float32)
    _shard(tmp_path / "a.npz", inputs, np.zeros(4096, np.int64))
    tracemalloc.start()
    try:
        data = _open(tmp_path, input_size=784, num_classes=10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1.6 * inputs.nbytes, f"opening took {peak / inputs.nbytes:.1f}x the inputs"
    assert np.array_equal(data.read(np.array([7, 3], np.int64)).inputs, inputs[[7, 3]])
