"""Which samples make global batch `step`: a pure function of the data set's size and the
section's shuffle, seed and drop_last_batch, so every input worker (and a resumed job) draws the
same batches with no state of its own.

The samples stream as consecutive epochs. Epoch e's order is
`np.random.default_rng([seed, e]).permutation(n)` when shuffled, else 0..n-1; batch `step` is the
next `batch_size` samples of its epoch. With drop_last the epoch's last, partial batch is
dropped; without it that batch is short (it holds the samples left). `num_examples` keeps the
data set's first num_examples samples (all of them when it holds fewer: the option bounds, it
does not demand). A data set that makes no batch at all is refused, and so is one of more than
MAX_SAMPLES samples: an epoch's order is an int64 array of every sample, and a header can claim
any count in a few bytes (2**40 samples would be 8 TiB at the first batch).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt

from appliance.domain.params import InputSection, Params
from appliance.workers.data.errors import DataError

Indices = npt.NDArray[np.int64]

# The most samples an order is drawn over (its permutation: 8 bytes a sample, 2 GiB).
MAX_SAMPLES = 1 << 28


@dataclasses.dataclass(frozen=True)
class InputPosition:
    """Where a batch starts in the sample stream: its epoch, and its first sample's place in
    that epoch's order."""

    epoch: int
    offset: int


class InputOrder:
    """The sample indices of every global batch; cheap: an epoch's permutation is computed once
    (the current one is kept), then a batch costs O(batch_size)."""

    def __init__(
        self,
        num_samples: int,
        batch_size: int,
        *,
        shuffle: bool,
        seed: int,
        drop_last: bool,
        name: str = "the data set",
    ) -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be > 0, got {batch_size}")
        if num_samples <= 0:
            raise DataError(f"{name} holds no samples")
        if num_samples > MAX_SAMPLES:
            raise DataError(
                f"{name} holds {num_samples} samples, more than the {MAX_SAMPLES} an input "
                "worker orders: set num_examples to use the first ones, or split the data set"
            )
        if drop_last and num_samples < batch_size:
            raise DataError(
                f"{name} holds {num_samples} samples, fewer than one batch of {batch_size} "
                "(drop_last_batch drops it): make batch_size smaller or set drop_last_batch: false"
            )
        self.num_samples = num_samples
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        full, rest = divmod(num_samples, batch_size)
        self.batches_per_epoch: int = full if drop_last or not rest else full + 1
        self._current: tuple[int, Indices] = (-1, np.arange(0, dtype=np.int64))

    def position(self, step: int) -> InputPosition:
        """Where batch `step` starts."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        epoch, index = divmod(step, self.batches_per_epoch)
        return InputPosition(epoch=epoch, offset=index * self.batch_size)

    def batch(self, step: int) -> tuple[Indices, InputPosition]:
        """The sample indices of global batch `step` and where it starts."""
        where = self.position(step)
        order = self.epoch_order(where.epoch)
        return order[where.offset : where.offset + self.batch_size], where

    def epoch_order(self, epoch: int) -> Indices:
        """All samples in epoch `epoch`'s order (read-only; the current epoch's is cached)."""
        cached_epoch, cached = self._current  # one read: safe with reader threads
        if cached_epoch == epoch:
            return cached
        if self.shuffle:
            order = np.random.default_rng([self.seed, epoch]).permutation(self.num_samples)
        else:
            order = np.arange(self.num_samples)
        order = order.astype(np.int64, copy=False)
        order.flags.writeable = False
        self._current = (epoch, order)
        return order


def input_order(
    section: InputSection, params: Params, num_samples: int, *, training: bool | None = None
) -> InputOrder:
    """The order of `section`'s batches over a data set of `num_samples` samples, defaults
    filled in: shuffle (None: on for training, off for evaluation), shuffle_seed (None:
    runconfig.seed), num_examples (the first ones). `training` says which section this is
    (None: training unless `section` is params.eval_input)."""
    if training is None:
        training = section is not params.eval_input
    shuffle = training if section.shuffle is None else section.shuffle
    seed = params.runconfig.seed if section.shuffle_seed is None else section.shuffle_seed
    used = num_samples if section.num_examples is None else min(num_samples, section.num_examples)
    return InputOrder(
        used,
        section.batch_size,
        shuffle=shuffle,
        seed=seed,
        drop_last=section.drop_last_batch,
        name=f"the data set in {section.data_dir}" if section.data_dir else "the data set",
    )
