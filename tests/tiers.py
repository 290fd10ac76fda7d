"""`make test`: the real-node tier in a pytest process of its own, beside the rest.

The real-node tests (tests/node) spend most of their ~11 minutes waiting on a kubelet, containerd
and pods on the host, and need nothing of the other tiers; run after them, that wait was the
longest stretch of CI. Here they start first, write to a file, and their output follows the
rest's when both are done. The exit status is the rest's, else the node tier's. Arguments go
to both pytest runs (e.g. `-x`, `-k name`). Ctrl-C stops both.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time

NODE_TIER = "tests/node"


def main(args: list[str]) -> int:
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=30"]
    began = time.monotonic()
    with tempfile.TemporaryFile("w+", prefix="appliance-node-tier-") as log:
        node = subprocess.Popen(
            [*pytest, *args, NODE_TIER], stdout=log, stderr=subprocess.STDOUT, text=True
        )
        try:
            rest = subprocess.call([*pytest, *args, f"--ignore={NODE_TIER}"])
            node_status = node.wait()
        except KeyboardInterrupt:  # the terminal sent SIGINT to both: let them finish saying so
            node.send_signal(signal.SIGINT)
            node.wait()
            return 130
        took = time.monotonic() - began
        print(f"\n==== the real-node tier ({NODE_TIER}), run beside the above ====", flush=True)
        log.seek(0)
        sys.stdout.write(log.read())
        print(f"==== both tiers done in {took:.0f} s ====", flush=True)
    if rest not in (0, 5):  # 5: nothing collected (a -k that picked only node tests)
        return rest
    return node_status if node_status not in (0, 5) else (0 if 0 in (rest, node_status) else 5)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
