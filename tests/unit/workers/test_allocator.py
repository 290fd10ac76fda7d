"""The replica's allocator keeps layer-sized buffers for reuse (glibc only)."""

from __future__ import annotations

import platform
import sys

from appliance.workers.allocator import keep_tensor_buffers


def test_glibc_takes_the_thresholds_and_other_platforms_are_left_alone() -> None:
    on_glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert keep_tensor_buffers() is on_glibc
