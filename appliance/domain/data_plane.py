"""What a replica says of its data plane: how it reaches each peer, one short line such as
`shared memory: swarmx-0, worker-0; grpc: none`, shown in the job's replica detail.

The replica chooses at Configure (shared memory with a peer on its host, gRPC with the others)
and its heartbeat carries the line to the coordinator. The replica bounds what it sends; the
coordinator trusts none of it: `data_plane_line` keeps one line, escapes its control and
invisible characters and bounds it again before it is stored.
"""

from __future__ import annotations

from appliance.domain.display import printable

# At most this many characters of the line are sent and kept (the rest cut, marked `…`).
MAX_DATA_PLANE = 200


def bounded(text: str) -> str:
    """`text` cut to MAX_DATA_PLANE characters, the last of them `…` when it was longer."""
    if len(text) > MAX_DATA_PLANE:
        return text[: MAX_DATA_PLANE - 1] + "…"
    return text


def data_plane_line(text: str) -> str:
    """What the coordinator stores of a replica's `text`: one line, every control or invisible
    character (newlines and tabs too) a visible escape, at most MAX_DATA_PLANE characters."""
    escaped = printable(text[: MAX_DATA_PLANE + 1]).replace("\n", "\\x0a").replace("\t", "\\x09")
    return bounded(escaped)
