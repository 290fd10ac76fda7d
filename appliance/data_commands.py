"""`appliance data ...`: make data sets in the formats the input workers read, on the user's
machine, from what a researcher has: text files to the Model Zoo's preprocessed-text HDF5
shards (the gpt2 model's byte-level tokenizer), images and labels (.npy) to MNIST's IDX files
or NumPy shards, and scikit-learn's handwritten digits as MNIST files.

Every input is read bounded (a regular file of at most MAX_INPUT_BYTES; a FIFO given by mistake
does not hang the command) and refused with one line naming it. Each command prints what it
wrote: every file with its samples and bytes, then the totals.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import click
import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from appliance.workers.data.writers import Written

MAX_INPUT_BYTES = 4 << 30
# Text becomes int64 tokens in memory (8 bytes a byte): all text inputs together at most this.
MAX_TEXT_BYTES = 256 << 20
_MAX_SEQUENCE_LENGTH = 1 << 16
_BYTE_VOCABULARY = 256
_NPY_MAGIC = b"\x93NUMPY"


@click.group()
def data() -> None:
    """Make data sets the input workers read (data_dir, data_processor in the params)."""


@data.group()
def preprocess() -> None:
    """Convert raw data to a data set format."""


@preprocess.command("text")
@click.option(
    "--input", "inputs", multiple=True, required=True, type=click.Path(path_type=Path),
    help="A UTF-8 text file (repeatable); their tokens are read back to back.",
)  # fmt: skip
@click.option("--output", required=True, type=click.Path(path_type=Path), help="Directory.")
@click.option(
    "--max-sequence-length", required=True,
    type=click.IntRange(2, _MAX_SEQUENCE_LENGTH), help="Tokens per sample (the job's).",
)  # fmt: skip
@click.option(
    "--vocab-size", default=_BYTE_VOCABULARY, show_default=True,
    type=click.IntRange(_BYTE_VOCABULARY, 1 << 20), help="The model's vocab_size.",
)  # fmt: skip
@click.option(
    "--samples-per-file", default=50_000, show_default=True,
    type=click.IntRange(1, 1 << 24), help="Samples in each .h5 shard.",
)  # fmt: skip
def preprocess_text(
    inputs: tuple[Path, ...],
    output: Path,
    max_sequence_length: int,
    vocab_size: int,
    samples_per_file: int,
) -> None:
    """Text files to HDF5 shards for GptHDF5DataProcessor (the Model Zoo's layout).

    Tokens are UTF-8 bytes (the gpt2 model's tokenizer, ids < 256 <= vocab_size). The tokens
    are cut into samples of max_sequence_length + 1 (inputs, labels shifted by one, attention
    mask all ones); the short tail is dropped, not padded.

    \b
    Example:
      appliance data preprocess text --input book.txt --output data/train \\
        --max-sequence-length 128
    """
    from appliance.workers.data.writers import token_samples, write_gpt_shards
    from appliance.workers.models.text_corpus import encode

    streams = []
    left = MAX_TEXT_BYTES
    for path in inputs:
        text = _read_input(path, left)
        left -= len(text)
        try:
            streams.append(encode(text.decode("utf-8")))
        except UnicodeDecodeError as exc:
            raise click.ClickException(f"{path} is not UTF-8 text: {exc.reason}") from None
    tokens = np.concatenate(streams)
    assert int(tokens.max(initial=0)) < vocab_size  # bytes: < 256 <= vocab_size
    samples = token_samples(tokens, max_sequence_length)
    if not len(samples):
        raise click.ClickException(
            f"{inputs[0]}{' ...' if len(inputs) > 1 else ''}: {len(tokens)} tokens, fewer than "
            f"one sample of {max_sequence_length + 1}; give more text or a shorter length"
        )
    _refuse_shards_in(output)
    with _writing(output):
        _report(write_gpt_shards(output, samples, samples_per_file))


@preprocess.command("images")
@click.option("--images", "images_path", required=True, type=click.Path(path_type=Path),
              help="A .npy of images (n, rows, columns) or (n, features).")  # fmt: skip
@click.option("--labels", "labels_path", required=True, type=click.Path(path_type=Path),
              help="A .npy of integer labels (n,).")  # fmt: skip
@click.option("--output", required=True, type=click.Path(path_type=Path), help="Directory.")
@click.option(
    "--format", "kind", type=click.Choice(["idx", "npz"]), default="idx", show_default=True,
    help="idx: MNISTDataProcessor's files; npz: a NumpyDataProcessor shard.",
)  # fmt: skip
@click.option(
    "--prefix", default="train", show_default=True,
    help="File names: <prefix>-images-idx3-ubyte ... (t10k for an eval set), or <prefix>.npz.",
)  # fmt: skip
def preprocess_images(
    images_path: Path, labels_path: Path, output: Path, kind: str, prefix: str
) -> None:
    """Images and labels (.npy) to MNIST's IDX files or a NumPy shard.

    IDX images are unsigned bytes (n, rows, columns): uint8 images are written as they are,
    floating ones in [0, 1] as round(255 x). Labels are integers (0..255 for IDX).

    \b
    Example:
      appliance data preprocess images --images x.npy --labels y.npy --output data/train
    """
    from appliance.workers.data.writers import write_idx_pair, write_npz

    if not prefix or "/" in prefix or prefix.startswith("."):
        raise click.ClickException(f"--prefix {prefix!r} must be a plain file name")
    images = _load_npy(images_path)
    labels = _load_npy(labels_path)
    if labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise click.ClickException(
            f"{labels_path}: labels must be integers of shape (n,), got {labels.dtype} "
            f"{labels.shape}"
        )
    if images.ndim < 2 or len(images) != len(labels) or not len(labels):
        raise click.ClickException(
            f"{images_path}: images {images.shape} must be (n, ...) with n = the labels' "
            f"{len(labels)} > 0"
        )
    if kind == "npz":
        with _writing(output):
            _report(write_npz(output, prefix, _npz_inputs(images, images_path), labels))
        return
    if images.ndim != 3:
        raise click.ClickException(
            f"{images_path}: IDX images are (n, rows, columns), got {images.shape}"
        )
    if labels.min() < 0 or labels.max() > 255:
        raise click.ClickException(f"{labels_path}: IDX labels are bytes, 0..255")
    pixels = _pixels(images, images_path)
    with _writing(output):
        _report(write_idx_pair(output, prefix, pixels, labels.astype(np.uint8)))


@data.command("digits")
@click.option("--output", required=True, type=click.Path(path_type=Path), help="Directory.")
@click.option(
    "--size", type=click.Choice(["8", "28"]), default="8", show_default=True,
    help="8: the digits as they are (input_size 64); 28: laid out as MNIST's (input_size 784).",
)  # fmt: skip
def digits(output: Path, size: str) -> None:
    """scikit-learn's handwritten digits (1,797 8x8 images) as MNIST IDX files.

    80% in OUTPUT/train (train-*), 20% in OUTPUT/val (t10k-*), a fixed split: data_dir of
    train_input and eval_input with MNISTDataProcessor.

    \b
    Example:
      appliance data digits --output data/digits --size 28
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise click.ClickException(
            "the digits come with scikit-learn: pip install scikit-learn"
        ) from None
    from appliance.workers.data.writers import write_digit_sets

    bunch = load_digits()
    with _writing(output):
        _report(write_digit_sets(output, bunch.images, bunch.target, int(size)))
    click.echo(f"params: model.input_size {int(size) ** 2}, num_classes 10")


@contextlib.contextmanager
def _writing(output: Path) -> Iterator[None]:
    """A failure to write under `output` as one line naming the file."""
    try:
        yield
    except OSError as exc:
        where = exc.filename or output
        raise click.ClickException(f"{where} cannot be written: {exc.strerror or exc}") from None


def _refuse_shards_in(output: Path) -> None:
    """Refuse an output directory already holding HDF5 shards: this run's (numbered from 0)
    would overwrite some and sit beside the rest, and the processor reads every one."""
    with contextlib.suppress(OSError):  # none there, or a failure the write will name
        with os.scandir(output) as listing:
            found = sorted(e.name for e in listing if e.name.endswith((".h5", ".hdf5")))
        if found:
            raise click.ClickException(
                f"{output} already holds {found[0]}{' ...' if len(found) > 1 else ''} (a data "
                "set); write to an empty directory or remove them"
            )


def _read_input(path: Path, limit: int) -> bytes:
    """The regular file `path`, whole (at most `limit` bytes), or one line saying why not."""
    fd = _open_input(path, limit)
    with os.fdopen(fd, "rb") as stream:
        return stream.read(limit + 1)


def _open_input(path: Path, limit: int) -> int:
    """A blocking descriptor of the regular file `path` of at most `limit` bytes."""
    try:  # O_NONBLOCK: a FIFO given by mistake must not hang the open
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise click.ClickException(f"{path} cannot be read: {exc.strerror}") from None
    info = os.fstat(fd)
    why = ""
    if not stat.S_ISREG(info.st_mode):
        why = f"{path} is not a regular file"
    elif info.st_size > limit:
        why = f"{path} has {info.st_size} bytes, more than {limit}"
    if why:
        os.close(fd)
        raise click.ClickException(why)
    os.set_blocking(fd, True)
    return fd


def _load_npy(path: Path) -> npt.NDArray[np.generic]:
    """The .npy `path` (memory-mapped: a header claiming more than the file holds is refused
    by the mapping, nothing is allocated for it), no pickles."""
    fd = _open_input(path, MAX_INPUT_BYTES)  # a regular file, bounded
    try:
        head = os.pread(fd, len(_NPY_MAGIC), 0)
    finally:
        os.close(fd)
    if head != _NPY_MAGIC:  # numpy would take it for a pickle and suggest allow_pickle
        raise click.ClickException(f"{path} is not a .npy array (no NumPy header)")
    try:
        values = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise click.ClickException(f"{path} is not a .npy array: {_line(exc)}") from None
    if not isinstance(values, np.ndarray):
        raise click.ClickException(f"{path} is not a .npy array (an .npz?)")
    return np.asarray(values)


def _npz_inputs(images: npt.NDArray[np.generic], path: Path) -> npt.NDArray[np.generic]:
    if images.dtype not in (np.uint8, np.float32, np.float64):
        raise click.ClickException(f"{path}: images are {images.dtype}; use uint8 or floats")
    if images.dtype != np.uint8 and not np.isfinite(images).all():
        raise click.ClickException(f"{path}: images have NaN or infinite values")
    return images


def _pixels(images: npt.NDArray[np.generic], path: Path) -> npt.NDArray[np.uint8]:
    if images.dtype == np.uint8:
        return images.astype(np.uint8)
    if images.dtype.kind != "f":
        raise click.ClickException(f"{path}: images are {images.dtype}; use uint8 or floats")
    if not np.isfinite(images).all():
        raise click.ClickException(f"{path}: images have NaN or infinite values")
    if images.min() < 0 or images.max() > 1:
        raise click.ClickException(f"{path}: floating images must be in [0, 1] for IDX")
    return np.rint(images.astype(np.float64) * 255.0).astype(np.uint8)


def _report(written: list[Written]) -> None:
    total = 0
    for item in written:
        size = item.size
        total += size
        click.echo(f"wrote {item.path}: {item.samples} samples, {size} bytes")
    samples = sum(item.samples for item in written)
    click.echo(f"{len(written)} files, {samples} samples, {total} bytes")


def _line(exc: BaseException) -> str:
    return (str(exc).strip() or type(exc).__name__).splitlines()[0]
