"""A writer process for the torn-write tests (test_ring_torn_writes.py): connects to the
reader's socket as a co-located replica would and streams large messages through its ring.

    ring_writer.py PATH TOKEN stream SEED   # messages until it is killed
    ring_writer.py PATH TOKEN early SEED    # a few messages, then announces a slot whose
                                            # header it has not written yet and dies

Each message is `index, length, sha256(body)` then the body (random bytes), so the reader can
tell a whole message from any other bytes. Run by path with PYTHONPATH at the repository.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import signal
import struct
import sys

from appliance.workers.transport import local_link

PREFIX = struct.Struct("<QQ32s")  # index, body length, sha256 of the body
PIECE = 256 << 10  # the writer hands the ring a message in pieces of this size
MAX_BODY = 3 << 20


def message(index: int, rng: random.Random) -> bytes:
    body = os.urandom(rng.randrange(1, MAX_BODY))
    return PREFIX.pack(index, len(body), hashlib.sha256(body).digest()) + body


def pieces(data: bytes) -> list[bytes | memoryview]:
    view = memoryview(data)
    return [view[start : start + PIECE] for start in range(0, len(data), PIECE)]


async def main(path: str, token: str, mode: str, seed: int) -> None:
    rng = random.Random(seed)
    link = await local_link.connect(path, token)
    index = 0
    while mode == "stream" or index < 3:
        await link.send_message(pieces(message(index, rng)))
        index += 1
    # A writer that announces its slot too early (the data and trailer written, the header
    # not yet) and is killed before it writes the header.
    ring = link._outbound
    seq, offset, length = await ring.write(
        pieces(message(index, rng)), link._inbound.peer_released
    )
    struct.pack_into("<QQ", ring._map, offset - 16, 0, 0)  # the header, as before the write
    link.send_frame(local_link.MESSAGE, seq, offset, length)  # written at once: no buffer yet
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
