"""An input worker's read-ahead: key order, a bounded depth, errors in order."""

from __future__ import annotations

import threading

import pytest

from appliance.workers.roles.input_prefetch import Prefetcher


class CountingReads:
    """A read of key k gives k * 10; records how far reading ran ahead of the consumer."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.lock = threading.Lock()
        self.started = 0
        self.released = 0
        self.most_ahead = 0
        self.fail_at = fail_at

    def __call__(self, key: int) -> int:
        with self.lock:
            self.started += 1
            self.most_ahead = max(self.most_ahead, self.started - self.released)
        if key == self.fail_at:
            raise ValueError(f"sample {key} is unreadable")
        return key * 10

    def release(self, prefetcher: Prefetcher[int]) -> None:
        with self.lock:
            self.released += 1
        prefetcher.release()


async def _drain(prefetcher: Prefetcher[int], reads: CountingReads) -> list[tuple[int, int]]:
    got = []
    while True:
        try:
            item = await prefetcher.next()
        except StopAsyncIteration:
            return got
        got.append(item)
        reads.release(prefetcher)


@pytest.mark.parametrize("threads", [1, 3])
async def test_items_come_in_key_order_and_reading_stays_within_the_depth(threads: int) -> None:
    reads = CountingReads()
    keys = range(1, 200, 3)  # every third step, as worker 1 of 3 serves them
    prefetcher = Prefetcher(reads, keys, depth=2, threads=threads)
    got = await _drain(prefetcher, reads)
    assert got == [(k, k * 10) for k in keys]
    assert reads.most_ahead <= 2
    prefetcher.close()


async def test_a_consumer_that_takes_nothing_leaves_the_readers_at_the_depth() -> None:
    reads = CountingReads()
    prefetcher = Prefetcher(reads, range(1000), depth=3, threads=4)
    first = await prefetcher.next()  # held, never released
    assert first == (0, 0)
    prefetcher.close()
    for thread in threading.enumerate():  # every read the readers started has ended
        if thread.name.startswith("input-reader-"):
            thread.join()
    assert prefetcher.held <= 3 and reads.started <= 3


async def test_a_read_error_reaches_the_consumer_in_key_order() -> None:
    reads = CountingReads(fail_at=4)
    prefetcher = Prefetcher(reads, range(10), depth=2, threads=2)
    for key in range(4):
        assert await prefetcher.next() == (key, key * 10)
        reads.release(prefetcher)
    with pytest.raises(ValueError, match="sample 4 is unreadable"):
        await prefetcher.next()
    prefetcher.close()
