"""`make test`: the tests in two lanes, each a pytest process, side by side.

The beside lane runs the real-node tier (tests/node), which mostly waits on a kubelet,
containerd and pods, in a pytest process of its own (BESIDE may name more tiers, run one after
the other); the main lane runs everything else. On CI's 2 cores make test took ~2,800 s with
the node tier after the rest and ~2,400 s with it beside. The beside lane writes to a file,
shown after the main lane's output once both are done. The exit status is the first failure
(main lane first). Arguments go to every pytest run (e.g. `-x`, `-k name`). Ctrl-C stops both.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO

# Only the real-node tier: with the end-to-end and kube-apiserver tiers beside the rest too, CI
# took 2,495 s instead of 2,764 s, but the machine ran at a load of 12 while both lanes ran real
# replicas, and two tests failed that pass alone (a lone coordinator's 5 s lease renewal came
# too late; a call counted after its caller saw the code).
BESIDE = ("tests/node",)
NOTHING_COLLECTED = 5  # pytest's exit status when a -k leaves a run no test


def main(args: list[str]) -> int:
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=30"]
    began = time.monotonic()
    statuses: list[int] = []
    stop = threading.Event()
    current: list[subprocess.Popen[bytes]] = []

    def beside(log: IO[str]) -> None:
        for tier in BESIDE:
            if stop.is_set():
                return
            print(f"==== {tier} (beside the rest) ====", file=log, flush=True)
            run = subprocess.Popen([*pytest, *args, tier], stdout=log, stderr=subprocess.STDOUT)
            current.append(run)
            statuses.append(run.wait())

    with tempfile.TemporaryFile("w+", prefix="appliance-beside-") as log:
        lane = threading.Thread(target=beside, args=(log,), daemon=True)
        lane.start()
        try:
            ignored = [f"--ignore={tier}" for tier in BESIDE]
            main_status = subprocess.call([*pytest, *args, *ignored])
            lane.join()
        except KeyboardInterrupt:  # the terminal sent SIGINT to all: let them finish saying so
            stop.set()
            for run in current:
                run.send_signal(signal.SIGINT)
                run.wait()
            return 130
        log.seek(0)
        sys.stdout.write("\n" + log.read())
        print(f"==== both lanes done in {time.monotonic() - began:.0f} s ====", flush=True)
    return _first_failure([main_status, *statuses])


def _first_failure(statuses: list[int]) -> int:
    """0 when every run passed or had nothing to run and one ran; else the first failure."""
    failed = [s for s in statuses if s not in (0, NOTHING_COLLECTED)]
    if failed:
        return failed[0]
    return 0 if 0 in statuses else NOTHING_COLLECTED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
