"""An input worker's read-ahead is bounded in bytes as well as in batches: prefetch_factor
batches of a large data set's shards would hold gigabytes per worker, and a node hosts eight."""

from __future__ import annotations

import numpy as np

from appliance.workers.data.arrays import InMemoryImages
from appliance.workers.data.order import InputOrder
from appliance.workers.roles.input_prefetch import PREFETCH_BYTES
from appliance.workers.roles.input_worker import DataSource


def _source(samples: int, features: int, batch_size: int, num_shards: int) -> DataSource:
    data = InMemoryImages(
        "/d", np.zeros((samples, features), np.float32), np.zeros(samples, np.int64)
    )
    order = InputOrder(samples, batch_size, shuffle=False, seed=0, drop_last=False)
    return DataSource.of(data, order, shard=0, num_shards=num_shards)


def test_read_ahead_holds_at_most_prefetch_bytes_of_shards() -> None:
    # The whole MNIST training set as one batch (batch_size 65536 > its 60,000 samples): a
    # shard of 188 MB, 64 of them 12 GB in one worker.
    source = _source(60_000, 784, 65_536, num_shards=1)
    shard_bytes = 60_000 * (784 * 4 + 8)
    depth = source.prefetch_depth(64)
    assert depth == PREFETCH_BYTES // shard_bytes and depth * shard_bytes <= PREFETCH_BYTES
    quarter = _source(60_000, 784, 65_536, num_shards=4)  # 15,000 rows a shard
    assert quarter.prefetch_depth(64) == PREFETCH_BYTES // (15_000 * (784 * 4 + 8))


def test_small_batches_read_as_far_ahead_as_asked_and_a_huge_one_still_one() -> None:
    assert _source(1000, 64, 32, num_shards=2).prefetch_depth(64) == 64
    assert _source(1000, 64, 32, num_shards=2).prefetch_depth(2) == 2
    # 65,536 samples of 16 KB: one shard passes the bound alone (zeros never touched: no RAM).
    assert _source(65_536, 4096, 65_536, num_shards=1).prefetch_depth(8) == 1
