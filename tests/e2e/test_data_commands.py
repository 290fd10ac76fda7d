"""`appliance data ...` as a user types it: what each command writes is read back by the input
workers' processors, it prints every file with its samples and bytes, and bad input is one
line naming the file (no traceback), a FIFO given as input included (it must not hang)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from appliance.domain.params import parse_params
from appliance.workers.data.dataset import DataSet, open_data_set
from appliance.workers.models.text_corpus import CORPUS_PATH

BIN = Path(sys.executable).parent


def _run(*args: str | Path, code: int = 0) -> str:
    done = subprocess.run(
        [BIN / "appliance", "data", *map(str, args)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == code, done.stdout + done.stderr
    if code:
        assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
        return done.stderr
    return done.stdout


def _fc(data_dir: Path, processor: str, input_size: int, training: bool = True) -> DataSet:
    section = {"data_dir": str(data_dir), "data_processor": processor}
    params = parse_params(
        {"model": {"name": "fc_mnist", "input_size": input_size},
         "train_input": section, "eval_input": section}
    )  # fmt: skip
    return open_data_set(params.train_input if training else params.eval_input, params)


def test_text_becomes_hdf5_shards_the_gpt_processor_reads(tmp_path: Path) -> None:
    out = _run(
        "preprocess", "text", "--input", CORPUS_PATH, "--output", tmp_path / "train",
        "--max-sequence-length", 64, "--samples-per-file", 500,
    )  # fmt: skip
    expected = len(CORPUS_PATH.read_bytes()) // 65
    assert re.search(r"wrote .*examples_0.h5: 500 samples, \d+ bytes", out), out
    assert re.search(rf"\d+ files, {expected} samples, \d+ bytes$", out.strip()), out
    params = parse_params(
        {"model": {"name": "gpt2"},
         "train_input": {"data_dir": str(tmp_path / "train"), "max_sequence_length": 64}}
    )  # fmt: skip
    data = open_data_set(params.train_input, params)
    assert len(data) == expected
    first = data.read(np.array([0], np.int64))
    assert bytes(first.inputs[0].tolist()) == CORPUS_PATH.read_bytes()[:64]


def test_bad_text_inputs_are_one_line_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "binary.txt").write_bytes(b"\xff\xfe\x00 not utf-8")
    (tmp_path / "short.txt").write_text("tiny")
    os.mkfifo(tmp_path / "fifo.txt")  # nobody writes: a blocking open would hang
    for name, said in (
        ("binary.txt", "is not UTF-8 text"),
        ("short.txt", "4 tokens, fewer than one sample of 9"),
        ("fifo.txt", "is not a regular file"),
        ("missing.txt", "cannot be read: No such file"),
    ):
        err = _run(
            "preprocess", "text", "--input", tmp_path / name, "--output", tmp_path / "out",
            "--max-sequence-length", 8, code=1,
        )  # fmt: skip
        assert f"Error: {tmp_path / name}" in err and said in err, err
    assert not (tmp_path / "out").exists()


def test_images_become_idx_files_or_an_npz_shard(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    np.save(tmp_path / "x.npy", rng.integers(0, 256, (20, 5, 4), dtype=np.uint8))
    np.save(tmp_path / "floats.npy", rng.random((20, 5, 4)))
    np.save(tmp_path / "y.npy", rng.integers(0, 10, 20))
    out = _run("preprocess", "images", "--images", tmp_path / "x.npy", "--labels",
               tmp_path / "y.npy", "--output", tmp_path / "idx")  # fmt: skip
    assert f"wrote {tmp_path / 'idx' / 'train-images-idx3-ubyte'}: 20 samples, 416 bytes" in out
    data = _fc(tmp_path / "idx", "MNISTDataProcessor", 20)
    batch = data.read(np.arange(20, dtype=np.int64))
    np.testing.assert_allclose(batch.inputs * 255, np.load(tmp_path / "x.npy").reshape(20, 20))
    assert batch.targets.tolist() == np.load(tmp_path / "y.npy").tolist()
    _run("preprocess", "images", "--images", tmp_path / "floats.npy", "--labels",
         tmp_path / "y.npy", "--output", tmp_path / "npz", "--format", "npz")  # fmt: skip
    shard = _fc(tmp_path / "npz", "NumpyDataProcessor", 20).read(np.array([3], np.int64))
    np.testing.assert_allclose(shard.inputs[0], np.load(tmp_path / "floats.npy")[3].ravel(),
                               rtol=1e-6)  # fmt: skip


def test_bad_images_and_labels_are_one_line_naming_the_file(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.zeros((4, 2, 2), np.uint8))
    np.save(tmp_path / "flat.npy", np.zeros((4, 4), np.uint8))
    np.save(tmp_path / "y.npy", np.arange(4))
    np.save(tmp_path / "float_y.npy", np.zeros(4))
    np.save(tmp_path / "three_y.npy", np.arange(3))
    np.save(tmp_path / "objects.npy", np.array([{}, {}, {}, {}], dtype=object), allow_pickle=True)
    whole = (tmp_path / "x.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(whole[:-5])
    for images, labels, said in (
        ("x.npy", "float_y.npy", "float_y.npy: labels must be integers"),
        (
            "x.npy",
            "three_y.npy",
            "x.npy: images (4, 2, 2) must be (n, ...) with n = the labels' 3",
        ),
        ("flat.npy", "y.npy", "flat.npy: IDX images are (n, rows, columns)"),
        ("objects.npy", "y.npy", "objects.npy is not a .npy array"),
        ("cut.npy", "y.npy", "cut.npy is not a .npy array"),
    ):
        err = _run("preprocess", "images", "--images", tmp_path / images, "--labels",
                   tmp_path / labels, "--output", tmp_path / "out", code=1)  # fmt: skip
        assert said in err, err


def test_digits_become_mnist_files_for_the_workshop_params(tmp_path: Path) -> None:
    out = _run("digits", "--output", tmp_path, "--size", 28)
    assert "wrote" in out and "4 files, 3594 samples" in out and "input_size 784" in out
    train = _fc(tmp_path / "train", "MNISTDataProcessor", 784)
    evaluation = _fc(tmp_path / "val", "MNISTDataProcessor", 784, training=False)
    assert (len(train), len(evaluation)) == (1438, 359)
    pixels = train.read(np.arange(len(train), dtype=np.int64)).inputs
    assert pixels.max() == 1.0 and pixels.reshape(-1, 28, 28)[:, :2].max() == 0.0  # the border


def test_digits_without_scikit_learn_say_how_to_install_it(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['sklearn'] = None\n"
        "from appliance.cli import main\n"
        f"main(['data', 'digits', '--output', {str(tmp_path)!r}])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 1
    assert done.stderr == "Error: the digits come with scikit-learn: pip install scikit-learn\n"


def test_text_into_a_directory_holding_shards_is_refused_not_mixed_with_them(
    tmp_path: Path,
) -> None:
    # Shards are numbered from 0 each run: a second run writing fewer of them left the first
    # run's examples_1.h5 beside its own, and the processor read every .h5 of the directory.
    (tmp_path / "book.txt").write_text("hello world " * 100)
    text = ("preprocess", "text", "--input", tmp_path / "book.txt", "--max-sequence-length", 8)
    _run(*text, "--output", tmp_path / "out", "--samples-per-file", 100)
    before = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert before == ["examples_0.h5", "examples_1.h5"]
    err = _run(*text, "--output", tmp_path / "out", code=1)
    assert f"Error: {tmp_path / 'out'} already holds examples_0.h5" in err, err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == before


def test_images_with_nan_or_a_file_that_is_no_npy_say_what_is_wrong(tmp_path: Path) -> None:
    np.save(tmp_path / "nan.npy", np.full((4, 2, 2), np.nan, np.float32))
    np.save(tmp_path / "y.npy", np.arange(4))
    (tmp_path / "text.npy").write_text("a text file, not an array\n")
    err = _run("preprocess", "images", "--images", tmp_path / "nan.npy", "--labels",
               tmp_path / "y.npy", "--output", tmp_path / "out", code=1)  # fmt: skip
    assert "nan.npy: images have NaN or infinite values" in err, err
    err = _run("preprocess", "images", "--images", tmp_path / "text.npy", "--labels",
               tmp_path / "y.npy", "--output", tmp_path / "out", code=1)  # fmt: skip
    assert "text.npy is not a .npy array" in err and "allow_pickle" not in err, err
