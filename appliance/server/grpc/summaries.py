"""Serialized job summaries for ListJobs and StreamJobs, cached under (job id, summary version).

Every write that changes what a summary shows bumps the job's version (JobStore), so cached
wire bytes are never stale, and listing a long history costs a key query and a byte join
instead of building and serializing every message again.

A queued job's queue position is the exception: it moves when other jobs enter, leave or
overtake in the queue, without this job's version. So it is never part of the cached bytes:
the positions of a page's queued jobs are read fresh on every call (one read of the queue) and
appended to their summaries as one more field (protobuf keeps the last value of a field).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence

from appliance._proto.v1 import cluster_pb2
from appliance.domain.job import Job
from appliance.domain.listing import JobKey
from appliance.domain.phases import Phase
from appliance.protocol import convert

MAX_CACHED = 150_000  # ~30 MB of summaries
MAX_RESPONSE_BYTES = 2 << 20  # well under gRPC's default 4 MiB receive limit
_JOBS_FIELD_TAG = b"\x0a"  # ListJobsResponse.jobs: field 1, length-delimited
_QUEUE_POSITION_TAG = b"\x38"  # Job.queue_position: field 7, varint

Summaries = Callable[[list[str]], Awaitable[list[Job]]]
Positions = Callable[[list[str]], Awaitable[dict[str, int]]]


class SummaryCache:
    def __init__(self, max_entries: int = MAX_CACHED) -> None:
        self.max_entries = max_entries
        self._data: OrderedDict[JobKey, bytes] = OrderedDict()
        self._queued: set[JobKey] = set()  # cached summaries of QUEUED jobs

    def __len__(self) -> int:
        return len(self._data)

    async def responses(
        self,
        keys: Sequence[JobKey],
        fetch: Summaries,
        positions: Positions,
        max_bytes: int = MAX_RESPONSE_BYTES,
    ) -> list[cluster_pb2.ListJobsResponse]:
        """Responses for one page of keys, each under `max_bytes` unless a single job is
        larger; `fetch` loads the summaries that are not cached, `positions` the queue
        positions of the page's queued jobs."""
        # Looked up before anything is added: adding may evict entries of this very page.
        cached = [(key, self._data.get(key), key in self._queued) for key in keys]
        missing = [key[0] for key, data, _ in cached if data is None]
        fetched = {job.id: job for job in await fetch(missing)} if missing else {}
        found: list[tuple[str, bytes, bool]] = []  # (job id, summary, queued)
        for key, data, queued in cached:
            if data is None:
                job = fetched.get(key[0])
                if job is None:
                    continue  # deleted between the two reads
                data = convert.job_to_pb(job).SerializeToString()
                queued = job.phase is Phase.QUEUED
                self._put(key, data, queued)
            found.append((key[0], data, queued))
        queued_ids = [job_id for job_id, _, queued in found if queued]
        where = await positions(queued_ids) if queued_ids else {}
        responses: list[cluster_pb2.ListJobsResponse] = []
        parts: list[bytes] = []
        size = 0
        for job_id, data, _ in found:
            position = where.get(job_id)
            if position:
                data += _QUEUE_POSITION_TAG + _varint(position)
            if parts and size + len(data) > max_bytes:
                responses.append(cluster_pb2.ListJobsResponse.FromString(b"".join(parts)))
                parts, size = [], 0
            parts.append(_JOBS_FIELD_TAG + _varint(len(data)) + data)
            size += len(data) + 8
        if parts:
            responses.append(cluster_pb2.ListJobsResponse.FromString(b"".join(parts)))
        return responses

    def _put(self, key: JobKey, data: bytes, queued: bool) -> None:
        self._data[key] = data
        if queued:
            self._queued.add(key)
        if len(self._data) > self.max_entries:
            evicted, _ = self._data.popitem(last=False)
            self._queued.discard(evicted)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
