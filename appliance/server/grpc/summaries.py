"""ListJobs and StreamJobs on the wire: cached serialized summaries joined into responses.

The list use case (services/listing.py) hands out each job's serialized summary (cached under
its version, and kept in the store across restarts) and its fresh queue position, pending
reason and estimated start. They are appended to the summary's bytes as more fields (protobuf
keeps the last value of a field), so a listed page costs a key query and a byte join instead
of building and serializing every message again.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Sequence

from appliance._proto.v1 import cluster_pb2, common_pb2
from appliance.domain.job import Job
from appliance.domain.reasons import Reason
from appliance.protocol import convert, spec_pb
from appliance.services.kept_renderings import Keeping, rendering_form
from appliance.services.listing import Listed

MAX_CACHED = 150_000  # ~30 MB of summaries
MAX_RESPONSE_BYTES = 2 << 20  # well under gRPC's default 4 MiB receive limit
_JOBS_FIELD_TAG = b"\x0a"  # ListJobsResponse.jobs: field 1, length-delimited
_QUEUE_POSITION_TAG = b"\x38"  # Job.queue_position: field 7, varint
_PENDING_REASON_TAG = b"\x32"  # Job.pending_reason: field 6, length-delimited
_PENDING_REASON_CODE_TAG = b"\xd2\x01"  # Job.pending_reason_code: field 26, length-delimited
_ESTIMATED_START_TAG = b"\xa1\x01"  # Job.estimated_start: field 20, 64-bit


def serialized(job: Job) -> bytes:
    """A summary as it is cached: the Job message's bytes, without a queue position."""
    return convert.job_to_pb(job).SerializeToString()


def _same(data: bytes) -> bytes:
    return data


# Kept as they are sent; any change to this module, the conversion or the messages renders
# everything again.
KEEPING = Keeping(
    rendering_form([sys.modules[__name__], convert, spec_pb, cluster_pb2, common_pb2]),
    _same,
    _same,
)


def responses(
    listed: Sequence[Listed[bytes]], max_bytes: int = MAX_RESPONSE_BYTES
) -> list[cluster_pb2.ListJobsResponse]:
    """Responses carrying `listed` in order, each under `max_bytes` unless a single job is
    larger."""
    out: list[cluster_pb2.ListJobsResponse] = []
    parts: list[bytes] = []
    size = 0
    # A pass's reasons are shared by the jobs of one shape: each one's fields encoded once.
    reasons: dict[int, bytes] = {}
    for data, position, reason, start in listed:
        pieces = [data]
        if position:
            pieces.append(_QUEUE_POSITION_TAG + _varint(position))
        if reason is not None:
            fields = reasons.get(id(reason))
            if fields is None:
                fields = reasons[id(reason)] = _reason_fields(reason)
            pieces.append(fields)
        if start:
            pieces.append(_ESTIMATED_START_TAG + struct.pack("<d", start))
        data = b"".join(pieces)
        if parts and size + len(data) > max_bytes:
            out.append(cluster_pb2.ListJobsResponse.FromString(b"".join(parts)))
            parts, size = [], 0
        parts.append(_JOBS_FIELD_TAG + _varint(len(data)) + data)
        size += len(data) + 8
    if parts:
        out.append(cluster_pb2.ListJobsResponse.FromString(b"".join(parts)))
    return out


def _reason_fields(reason: Reason) -> bytes:
    """A queued job's pending reason and its code, as fields of its Job message."""
    text, code = reason.message.encode(), reason.code_text.encode()
    return (
        _PENDING_REASON_TAG + _varint(len(text)) + text
        + _PENDING_REASON_CODE_TAG + _varint(len(code)) + code
    )  # fmt: skip


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
