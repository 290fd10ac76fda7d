"""`appliance serve` under cProfile in every thread (event loop and store threads alike).

Used by the benchmarks' `--profile OUT.prof` option; stats are written when the coordinator
stops (SIGTERM). Read them with `python -m bench.profile_report OUT.prof`.

    python -m bench._profiled_serve OUT.prof serve --data-dir DIR --grpc-port 0 --http-port 0
"""

from __future__ import annotations

import contextlib
import cProfile
import pstats
import sys
import threading
from typing import Any

from appliance.cli import main as appliance_main

_profilers: list[cProfile.Profile] = []


def _start_in_thread(frame: Any, event: str, arg: Any) -> None:
    profiler = cProfile.Profile()
    _profilers.append(profiler)
    sys.setprofile(None)
    profiler.enable()


def main() -> None:
    out = sys.argv[1]
    threading.setprofile(_start_in_thread)
    profiler = cProfile.Profile()
    _profilers.append(profiler)
    profiler.enable()
    try:
        appliance_main(sys.argv[2:], prog_name="appliance")
    finally:
        profiler.disable()
        stats = pstats.Stats(profiler)
        for other in _profilers[1:]:
            with contextlib.suppress(TypeError):  # a profiler that never saw a call
                stats.add(other)
        stats.dump_stats(out)


if __name__ == "__main__":
    main()
