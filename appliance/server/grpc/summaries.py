"""Serialized job summaries for StreamJobs, cached under (job id, summary version).

Every write that changes what a summary shows bumps the job's version (JobStore), so cached
wire bytes are never stale, and listing a long history costs a key query and a byte join
instead of building and serializing every message again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence

from appliance._proto import convert
from appliance._proto.v1 import cluster_pb2
from appliance.domain.job import Job
from appliance.store.jobs import JobKey

MAX_CACHED = 150_000  # ~30 MB of summaries
MAX_RESPONSE_BYTES = 2 << 20  # well under gRPC's default 4 MiB receive limit
_JOBS_FIELD_TAG = b"\x0a"  # ListJobsResponse.jobs: field 1, length-delimited


class SummaryCache:
    def __init__(self, max_entries: int = MAX_CACHED) -> None:
        self.max_entries = max_entries
        self._data: OrderedDict[JobKey, bytes] = OrderedDict()

    def __len__(self) -> int:
        return len(self._data)

    async def responses(
        self,
        keys: Sequence[JobKey],
        fetch: Callable[[list[str]], Awaitable[list[Job]]],
        max_bytes: int = MAX_RESPONSE_BYTES,
    ) -> list[cluster_pb2.ListJobsResponse]:
        """Responses for one page of keys, each under `max_bytes` unless a single job is
        larger; `fetch` loads the summaries that are not cached."""
        missing = [k[0] for k in keys if k not in self._data]
        fetched = {job.id: job for job in await fetch(missing)} if missing else {}
        responses: list[cluster_pb2.ListJobsResponse] = []
        parts: list[bytes] = []
        size = 0
        for key in keys:
            data = self._data.get(key)
            if data is None:
                job = fetched.get(key[0])
                if job is None:
                    continue  # deleted between the two reads
                data = convert.job_to_pb(job).SerializeToString()
                self._put(key, data)
            if parts and size + len(data) > max_bytes:
                responses.append(cluster_pb2.ListJobsResponse.FromString(b"".join(parts)))
                parts, size = [], 0
            parts.append(_JOBS_FIELD_TAG + _varint(len(data)) + data)
            size += len(data) + 8
        if parts:
            responses.append(cluster_pb2.ListJobsResponse.FromString(b"".join(parts)))
        return responses

    def _put(self, key: JobKey, data: bytes) -> None:
        self._data[key] = data
        if len(self._data) > self.max_entries:
            self._data.popitem(last=False)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
