"""Real data sets for the tests, written in the formats the input workers read.

- `write_digits(directory)`: scikit-learn's handwritten digits (1,797 real 8x8 images, a test
  dependency) as MNIST IDX files, 80% in directory/train (train-*) and 20% in directory/val
  (t10k-*), for fc_mnist with model.input_size 64 (size=28: 784) and num_classes 10;
- `write_gpt_text(directory, sequence_length)`: the bundled corpus as the Model Zoo's
  preprocessed-text HDF5 shards, its first 90% in directory/train and the rest in
  directory/val (the corpus's own split), for gpt2 with that max_sequence_length.
Both return (train data_dir, eval data_dir).
"""

from __future__ import annotations

from pathlib import Path

from appliance.workers.data.writers import token_samples, write_digit_sets, write_gpt_shards
from appliance.workers.models.text_corpus import load_corpus

DIGITS = 1797
DIGITS_TRAIN = 1438
DIGITS_EVAL = DIGITS - DIGITS_TRAIN


def write_digits(directory: Path, size: int = 8) -> tuple[Path, Path]:
    """The digits as MNIST files under `directory`: (train dir, eval dir)."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    write_digit_sets(directory, bunch.images, bunch.target, size)
    return directory / "train", directory / "val"


def write_gpt_text(
    directory: Path, sequence_length: int, samples_per_file: int = 64
) -> tuple[Path, Path]:
    """The bundled corpus as HDF5 shards under `directory`: (train dir, eval dir)."""
    corpus = load_corpus()
    for name, tokens in (("train", corpus.train_tokens), ("val", corpus.eval_tokens)):
        write_gpt_shards(
            directory / name, token_samples(tokens, sequence_length), samples_per_file
        )
    return directory / "train", directory / "val"
