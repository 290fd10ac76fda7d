"""Reading ahead, with bounded memory: an input worker's batches, prepared in reader threads.

A `Prefetcher` reads the items of a sequence of keys (the steps a worker serves) in key order,
in `threads` reader threads, at most `depth` ahead: an item read (or being read) counts until
its consumer `release`s it, and no reader claims the next key while `depth` items count. So
however slowly the consumer takes them (gRPC flow control holding back its writes), the worker
never holds more than `depth` batches, and a reader's error reaches the consumer in key order.
Threads, because reading is file I/O and NumPy, both of which release the GIL. The depth a
worker asks for is bounded in bytes too (`depth_within`): at most PREFETCH_BYTES of batches.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

_T = TypeVar("_T")

# The most a worker's read-ahead holds (a node hosts up to eight workers), unless one batch is
# larger: prefetch_factor 64 of a 188 MB batch (all of MNIST) would be 12 GB.
PREFETCH_BYTES = 1 << 30


def depth_within(wanted: int, item_bytes: int) -> int:
    """`wanted` items ahead, fewer when that many pass PREFETCH_BYTES; at least one."""
    return max(1, min(wanted, PREFETCH_BYTES // max(1, item_bytes)))


class Prefetcher(Generic[_T]):
    """`read(key)` for every key of `keys`, in reader threads, at most `depth` items ahead."""

    def __init__(
        self, read: Callable[[int], _T], keys: Sequence[int], depth: int, threads: int = 1
    ) -> None:
        if depth < 1 or threads < 1:
            raise ValueError("a prefetcher needs a depth and a thread")
        self._read = read
        self._keys = keys
        self._depth = depth
        self._changed = threading.Condition()
        self._claimed = 0  # keys[:_claimed] are read, being read or released
        self._taken = 0  # keys[:_taken] were handed to the consumer
        self._held = 0  # claimed and not yet released
        self._closed = False
        self._results: dict[int, concurrent.futures.Future[_T]] = {}
        self._threads = [
            threading.Thread(target=self._reader, name=f"input-reader-{n}", daemon=True)
            for n in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def held(self) -> int:
        """Items read or being read that the consumer has not released."""
        with self._changed:
            return self._held

    def __len__(self) -> int:
        return len(self._keys)

    async def next(self) -> tuple[int, _T]:
        """The next key and its item, once read (raises what reading it raised); StopAsyncIteration
        after the last."""
        with self._changed:
            if self._taken >= len(self._keys):
                raise StopAsyncIteration
            index = self._taken
            self._taken += 1
            result = self._results.setdefault(index, concurrent.futures.Future())
        try:
            # Shielded: a cancelled consumer must not cancel the future a reader will set.
            item = await asyncio.shield(asyncio.wrap_future(result))
        finally:
            with self._changed:
                del self._results[index]
        return self._keys[index], item

    def release(self) -> None:
        """The consumer is done with one item (it has been sent): a reader may read another."""
        with self._changed:
            self._held -= 1
            self._changed.notify_all()

    def close(self) -> None:
        """Stop reading; reader threads end once their current read returns."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _reader(self) -> None:
        while (index := self._claim()) is not None:
            with self._changed:
                result = self._results.setdefault(index, concurrent.futures.Future())
            try:
                result.set_result(self._read(self._keys[index]))
            except BaseException as error:  # to the consumer, in key order
                result.set_exception(error)
                self.close()
                return

    def _claim(self) -> int | None:
        """The index of the next key to read, once fewer than `depth` items are held; None when
        closed or every key is claimed."""
        with self._changed:
            while not self._closed and self._claimed < len(self._keys):
                if self._held < self._depth:
                    self._held += 1
                    self._claimed += 1
                    return self._claimed - 1
                self._changed.wait()
            return None
