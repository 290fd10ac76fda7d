"""GptHDF5DataProcessor reads the Model Zoo's preprocessed-text shards (h5py files: dataset
`data` (n, 3, L) of input ids, attention mask, labels; attribute n_examples) into batches of
the gpt2 model's own kinds; every hostile shard is a DataError naming it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import numpy.typing as npt
import pytest

from appliance.domain.params import Params, parse_params
from appliance.workers.data.dataset import DataError, DataSet, open_data_set
from appliance.workers.data.gpt_hdf5 import GptHdf5Set
from appliance.workers.data.writers import text_samples, write_gpt_shards
from appliance.workers.models.gpt2 import Gpt2
from tests.data_sets import write_gpt_text

LENGTH = 8


def _params(data_dir: Path, vocab_size: int = 256) -> Params:
    return parse_params(
        {
            "model": {"name": "gpt2", "vocab_size": vocab_size, "max_position_embeddings": 16},
            "train_input": {
                "data_dir": str(data_dir),
                "max_sequence_length": LENGTH,
                "batch_size": 2,
            },
        }
    )


def _open(data_dir: Path, vocab_size: int = 256) -> DataSet:
    params = _params(data_dir, vocab_size)
    return open_data_set(params.train_input, params)


def _shard(path: Path, data: npt.ArrayLike, **attrs: Any) -> None:
    with h5py.File(path, "w") as shard:
        shard.create_dataset("data", data=np.asarray(data))
        shard.attrs.update(attrs)


def _sparse(path: Path, samples: int, chunk: int = 1) -> None:
    with h5py.File(path, "w") as shard:
        shard.create_dataset(
            "data", shape=(samples, 3, LENGTH), dtype="i4", chunks=(chunk, 3, LENGTH)
        )


def test_shards_become_the_models_own_batch_kinds(tmp_path: Path) -> None:
    write_gpt_shards(tmp_path, text_samples("abcdefghi" * 5, LENGTH), samples_per_file=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "examples_0.h5", "examples_1.h5", "examples_2.h5",
    ]  # fmt: skip
    data = _open(tmp_path)
    assert len(data) == 5  # 45 bytes: 5 samples of 9 tokens
    batch = data.read(np.array([4, 0, 4], np.int64))
    own = Gpt2(_params(tmp_path)).train_batch(0)
    assert (batch.inputs.dtype, batch.targets.dtype) == (own.inputs.dtype, own.targets.dtype)
    assert batch.inputs.shape == batch.targets.shape == (3, LENGTH) == (3, own.inputs.shape[1])
    assert bytes(batch.inputs[1].tolist()) == b"abcdefgh"
    assert bytes(batch.targets[1].tolist()) == b"bcdefghi"
    assert batch.inputs[0].tolist() == batch.inputs[2].tolist()


def test_the_model_zoo_layout_as_written_by_h5py(tmp_path: Path) -> None:
    ids = np.arange(2 * (LENGTH + 1), dtype=np.int32).reshape(2, LENGTH + 1)
    samples = np.stack([ids[:, :-1], np.ones((2, LENGTH), np.int32), ids[:, 1:]], axis=1)
    with h5py.File(tmp_path / "examples_0_0.h5", "w") as shard:
        shard.attrs["n_examples"] = 2
        shard.create_dataset("data", data=samples, dtype="i4", chunks=(1, 3, LENGTH),
                             compression="gzip")  # fmt: skip
    batch = _open(tmp_path).read(np.array([1], np.int64))
    assert batch.inputs.tolist() == [list(range(9, 17))]
    assert batch.targets.tolist() == [list(range(10, 18))]


def test_the_bundled_corpus_helper_writes_train_and_eval_sets(tmp_path: Path) -> None:
    train, evaluation = write_gpt_text(tmp_path, LENGTH)
    assert len(_open(train)) > 8 * len(_open(evaluation)) > 0  # the corpus: 90% / 10%


def _good(count: int = 2) -> npt.NDArray[np.int32]:
    return text_samples("x" * (LENGTH + 1) * count, LENGTH)


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda p: p.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 40), "is not a readable HDF5"),
        (lambda p: p.write_bytes(os.urandom(4096)), "is not a readable HDF5"),
        (lambda p: _shard(p, _good()[:, :2]), r"shape \(2, 2, 8\); the layout is"),
        (lambda p: _shard(p, np.zeros((2, 5, LENGTH), np.int32)), r"shape \(2, 5, 8\)"),
        (lambda p: _shard(p, _good()[:, :, :4]), "have 4 tokens; the job's max_sequence_length"),
        (lambda p: _shard(p, _good().astype(np.float32)), "dtype float32"),
        (lambda p: _shard(p, np.zeros((0, 3, LENGTH), np.int32)), "holds no samples"),
        (lambda p: _shard(p, _good(), n_examples=3), "n_examples is 3, 'data' has 2"),
        (lambda p: _shard(p, _good(), n_examples="2"), "n_examples is '2'"),
        (lambda p: h5py.File(p, "w").close(), "has no dataset 'data'"),
        # A chunked dataset may claim any number of samples in a few bytes (none written).
        (lambda p: _sparse(p, 1 << 40), "'data' claims 1099511627776 samples, more than"),
        # One chunk is decompressed whole to read any sample of it: 2**21 samples in one chunk
        # (a few KB of zeros, gzip'd) were 192 MiB of memory and time at every batch.
        (
            lambda p: _sparse(p, 1 << 21, chunk=1 << 21),
            r"'data' is stored in chunks of 201326592 bytes, more than 67108864",
        ),
    ],
)
def test_a_bad_shard_is_refused_at_open(tmp_path: Path, make: Any, said: str) -> None:
    write_gpt_shards(tmp_path, _good(), 2)
    make(tmp_path / "bad.h5")
    with pytest.raises(DataError, match=said) as caught:
        _open(tmp_path)
    assert str(tmp_path / "bad.h5") in str(caught.value) and "\n" not in str(caught.value)


def test_data_kept_in_another_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "secret").write_bytes(b"\1" * 4 * 3 * LENGTH)  # someone else's file
    with h5py.File(tmp_path / "outside.h5", "w") as shard:
        shard.create_dataset("data", shape=(1, 3, LENGTH), dtype="i4",
                             external=[(str(tmp_path / "secret"), 0, 4 * 3 * LENGTH)])  # fmt: skip
    data_dir = tmp_path / "data"
    write_gpt_shards(data_dir, _good(), 2)
    with h5py.File(data_dir / "linked.h5", "w") as shard:
        shard["data"] = h5py.ExternalLink(str(tmp_path / "outside.h5"), "data")
    with pytest.raises(DataError, match=r"linked.h5: 'data' is a link elsewhere"):
        _open(data_dir)
    (data_dir / "linked.h5").unlink()
    os.rename(tmp_path / "outside.h5", data_dir / "external.h5")
    with pytest.raises(DataError, match=r"external.h5: 'data' keeps its values in other files"):
        _open(data_dir)
    (data_dir / "external.h5").unlink()
    layout = h5py.VirtualLayout(shape=(2, 3, LENGTH), dtype="i4")
    layout[:] = h5py.VirtualSource(str(data_dir / "examples_0.h5"), "data", shape=(2, 3, LENGTH))
    with h5py.File(data_dir / "virtual.h5", "w") as shard:
        shard.create_virtual_dataset("data", layout)
    with pytest.raises(DataError, match=r"virtual.h5: 'data' keeps its values in other files"):
        _open(data_dir)


def test_a_truncated_shard_is_refused(tmp_path: Path) -> None:
    write_gpt_shards(tmp_path, _good(200), 200)
    whole = (tmp_path / "examples_0.h5").read_bytes()
    (tmp_path / "examples_0.h5").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DataError, match=r"examples_0.h5 (is not a readable HDF5|cannot be read)"):
        data = _open(tmp_path)
        data.read(np.arange(len(data), dtype=np.int64))


@pytest.mark.parametrize(
    ("column", "value", "said"),
    [
        (1, 0, "sample 1 is padded"),
        (0, 300, "sample 1 has an input id out of 0..255"),
        (2, -1, "sample 1 has a label out of 0..255"),
    ],
)
def test_a_bad_sample_is_refused_when_read(
    tmp_path: Path, column: int, value: int, said: str
) -> None:
    samples = _good(3)
    samples[1, column, -1] = value
    _shard(tmp_path / "a.h5", samples, n_examples=3)
    data = _open(tmp_path)
    assert data.read(np.array([0, 2], np.int64)).inputs.shape == (2, LENGTH)
    with pytest.raises(DataError, match=said) as caught:
        data.read(np.array([2, 1], np.int64))
    assert str(tmp_path / "a.h5") in str(caught.value)


def test_ids_past_a_larger_vocabulary_only_are_refused(tmp_path: Path) -> None:
    samples = _good()
    samples[0, 0, 0] = 400
    samples[0, 2, 0] = 400
    _shard(tmp_path / "a.h5", samples)
    assert _open(tmp_path, vocab_size=512).read(np.array([0], np.int64)).inputs[0, 0] == 400


def test_a_fifo_a_link_and_a_missing_dir_are_refused(tmp_path: Path) -> None:
    write_gpt_shards(tmp_path / "elsewhere", _good(), 2)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    os.mkfifo(data_dir / "a.h5")
    with pytest.raises(DataError, match=r"a.h5 is not a regular file \(a FIFO\)"):
        _open(data_dir)
    os.unlink(data_dir / "a.h5")
    (data_dir / "a.h5").symlink_to(tmp_path / "elsewhere" / "examples_0.h5")
    with pytest.raises(DataError, match=r"a.h5 is a symbolic link"):
        _open(data_dir)
    with pytest.raises(DataError, match="nowhere does not exist"):
        _open(tmp_path / "nowhere")
    os.unlink(data_dir / "a.h5")
    with pytest.raises(DataError, match=r"holds no .h5 file"):
        _open(data_dir)


def test_shuffled_batches_over_many_shards_open_each_shard_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundled corpus in 40 shards: a shuffled batch reads from many of them, and reopening
    (and rechecking) one per sample read cost most of the read."""
    train, _ = write_gpt_text(tmp_path, LENGTH, samples_per_file=200)
    data_set = _open(train)
    opened: list[str] = []
    real = GptHdf5Set._open_shard

    def counted(self: GptHdf5Set, folder: int, name: str) -> Any:
        opened.append(name)
        return real(self, folder, name)

    monkeypatch.setattr(GptHdf5Set, "_open_shard", counted)
    shards = len(list(train.glob("*.h5")))
    assert 16 < shards <= 64
    order = np.random.default_rng(0).permutation(len(data_set))
    for batch in np.array_split(order, 40):
        data_set.read(batch.astype(np.int64))
    assert sorted(opened) == sorted({p.name for p in train.glob("*.h5")})
