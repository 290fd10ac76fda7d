"""A replica's exit is its own decision: a SIGTERM that comes while the process shuts down
(the teardown of a job that just succeeded) does not make a clean end read "killed by SIGTERM"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# SIGTERM to itself as the interpreter shuts down, after `finish` decided the exit code: where
# the teardown's signal lands when the chief's "shutdown" reached the replica first.
LATE_SIGTERM = """
import atexit, os, signal, sys
from appliance.workers.__main__ import finish
atexit.register(os.kill, os.getpid(), signal.SIGTERM)
finish(int(sys.argv[1]), sys.argv[2])
"""


def test_a_sigterm_while_the_replica_exits_keeps_its_exit_code(tmp_path: Path) -> None:
    exit_file = tmp_path / "exit"
    done = subprocess.run(
        [sys.executable, "-c", LATE_SIGTERM, "0", str(exit_file)], capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr  # not -15: the process was not killed
    assert exit_file.read_text() == "0\n"


def test_a_replica_failing_keeps_its_code_too(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", LATE_SIGTERM, "1", str(tmp_path / "exit")], timeout=60
    )
    assert done.returncode == 1
