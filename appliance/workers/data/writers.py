"""Writing data sets in the formats the processors read (the `appliance data` commands and the
tests): MNIST's IDX pairs, NumPy shards, and the Model Zoo's preprocessed-text HDF5 shards made
with the gpt2 model's tokenizer (byte-level: one token per UTF-8 byte, text_corpus.encode).

Text becomes samples as the Model Zoo's auto-regressive LM preprocessing makes them: the token
stream is cut into consecutive chunks of max_sequence_length + 1 tokens; a chunk's first L
tokens are the input ids, its last L the labels, the attention mask all ones. The short tail is
dropped rather than padded: this GPT has no attention mask (gpt_hdf5.py refuses padding).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import h5py
import numpy as np
import numpy.typing as npt

from appliance.workers.data.idx import idx_bytes
from appliance.workers.models.text_corpus import encode

# The Model Zoo's output_name default: shards are examples_0.h5, examples_1.h5, ...
SHARD_PREFIX = "examples"


@dataclasses.dataclass(frozen=True)
class Written:
    """A file written, and how many samples it holds."""

    path: Path
    samples: int

    @property
    def size(self) -> int:
        """Its size in bytes."""
        return self.path.stat().st_size


def text_samples(text: str, sequence_length: int) -> npt.NDArray[np.int32]:
    """`text` as preprocessed-text samples, int32 (n, 3, sequence_length)."""
    return token_samples(encode(text), sequence_length)


def token_samples(tokens: npt.NDArray[np.int64], sequence_length: int) -> npt.NDArray[np.int32]:
    """Consecutive chunks of sequence_length + 1 `tokens` as samples, int32 (n, 3, L)."""
    chunk = sequence_length + 1
    count = len(tokens) // chunk
    chunks = tokens[: count * chunk].reshape(count, chunk).astype(np.int32)
    samples = np.empty((count, 3, sequence_length), dtype=np.int32)
    samples[:, 0] = chunks[:, :-1]
    samples[:, 1] = 1
    samples[:, 2] = chunks[:, 1:]
    return samples


def write_gpt_shards(
    output: Path, samples: npt.NDArray[np.int32], samples_per_file: int
) -> list[Written]:
    """`samples` (n, 3, L) as HDF5 shards of at most `samples_per_file` samples in `output`,
    in the Model Zoo's layout: dataset `data` (int32, gzip'd chunks of one sample) and
    attribute `n_examples`."""
    output.mkdir(parents=True, exist_ok=True)
    written = []
    for number, start in enumerate(range(0, len(samples), samples_per_file)):
        part = samples[start : start + samples_per_file]
        path = output / f"{SHARD_PREFIX}_{number}.h5"
        with h5py.File(path, "w") as shard:
            shard.attrs["n_examples"] = len(part)
            shard.create_dataset(
                "data", data=part, dtype="i4", chunks=(1, *part.shape[1:]), compression="gzip"
            )
        written.append(Written(path, len(part)))
    return written


def write_idx_pair(
    output: Path, prefix: str, images: npt.NDArray[np.uint8], labels: npt.NDArray[np.uint8]
) -> list[Written]:
    """`<prefix>-images-idx3-ubyte` and `<prefix>-labels-idx1-ubyte` in `output`."""
    output.mkdir(parents=True, exist_ok=True)
    written = []
    for kind, values in (("images-idx3", images), ("labels-idx1", labels)):
        path = output / f"{prefix}-{kind}-ubyte"
        path.write_bytes(idx_bytes(values))
        written.append(Written(path, len(values)))
    return written


def write_npz(
    output: Path, name: str, images: npt.NDArray[np.generic], labels: npt.NDArray[np.generic]
) -> list[Written]:
    """One NumPy shard `name`.npz with `inputs` and `labels` in `output`."""
    output.mkdir(parents=True, exist_ok=True)
    path = output / f"{name}.npz"
    np.savez(path, inputs=images, labels=labels)
    return [Written(path, len(labels))]


def digit_images(images: npt.NDArray[np.floating], size: int) -> npt.NDArray[np.uint8]:
    """scikit-learn's digits (n, 8, 8), grey levels 0..16, as uint8 pixels (n, size, size):
    8x8 as they are, or 28x28 as MNIST lays a digit out (each pixel made 3x3, the 24x24 digit
    centred on a 2-pixel border)."""
    pixels = np.rint(np.asarray(images, dtype=np.float64) * (255.0 / 16.0)).astype(np.uint8)
    if size == 8:
        return pixels
    if size != 28:
        raise ValueError(f"digits are 8x8 or 28x28, not {size}x{size}")
    grown = pixels.repeat(3, axis=1).repeat(3, axis=2)
    return np.pad(grown, ((0, 0), (2, 2), (2, 2)))


def split_train_eval(
    count: int, eval_fraction: float = 0.2, seed: int = 0
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """A deterministic split of `count` samples: (training indices, evaluation indices)."""
    order = np.random.default_rng(seed).permutation(count)
    held = round(count * eval_fraction)
    return np.sort(order[held:]), np.sort(order[:held])


def write_digit_sets(
    output: Path, images: npt.NDArray[np.floating], labels: npt.NDArray[np.integer], size: int
) -> list[Written]:
    """scikit-learn's digits (load_digits' images and target) as MNIST IDX files: 80% in
    output/train (train-*), 20% in output/val (t10k-*), a fixed split."""
    pixels = digit_images(images, size)
    targets = np.asarray(labels).astype(np.uint8)
    train, held = split_train_eval(len(targets))
    return write_idx_pair(output / "train", "train", pixels[train], targets[train]) + (
        write_idx_pair(output / "val", "t10k", pixels[held], targets[held])
    )
