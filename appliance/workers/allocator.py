"""The replica process's C allocator, tuned for a stream of megabyte-sized tensor messages.

Every step, each replica allocates and frees several buffers of about a layer's size: gRPC's
message slices, the serialized protobuf, the decoded bytes, NumPy results. glibc serves blocks
above a (dynamic) threshold with mmap and returns freed heap tops to the kernel, so each such
buffer came back as fresh pages: ~1,500 page faults (and their zeroing) per fc_mnist step in
SwarmX, a third of its CPU time. With a fixed mmap threshold and a high trim threshold, freed
buffers stay in the heap and the next message reuses them. Memory kept for reuse is bounded by
the trim threshold; blocks above the mmap threshold are still mapped and unmapped as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)

# mallopt parameters, from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 << 20  # the largest glibc accepts on every 64-bit version
TRIM_THRESHOLD = 128 << 20


def keep_tensor_buffers() -> bool:
    """Make glibc reuse freed layer-sized buffers; False (and no change) off glibc."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    applied = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    applied = bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and applied
    if not applied:
        log.warning("could not tune the allocator for tensor buffers (mallopt refused)")
    return applied
