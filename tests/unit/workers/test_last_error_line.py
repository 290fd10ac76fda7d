"""The replica program's top level turns an unhandled error into one line, last on stderr and
in its error file (what the coordinator puts in the job's reason)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# The worker's command line with a run that raises: what any unexpected error of a role does.
FAILING_RUN = """
import sys
from appliance.workers import runtime
from appliance.workers.__main__ import main

async def run_replica(options, role, channels):
    raise RuntimeError("the run broke:\\n\\x1b[31m here")

runtime.run_replica = run_replica
main(sys.argv[1:])
"""


def test_an_unhandled_error_is_the_last_line_on_stderr_and_in_the_error_file(
    tmp_path: Path,
) -> None:
    error_file, exit_file = tmp_path / "chief-0.error", tmp_path / "chief-0.exit"
    command = [
        sys.executable, "-c", FAILING_RUN, "chief", "--job-id", "wsjob-lasterror00001",
        "--replica", "chief-0", "--coordinator", "127.0.0.1:1",
        "--exit-file", str(exit_file), "--error-file", str(error_file),
    ]  # fmt: skip
    env = {**os.environ, "APPLIANCE_DATAPLANE_TOKEN": "t" * 32}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    line = "RuntimeError: the run broke: \\x1b[31m here"
    assert done.returncode == 1, done.stderr
    assert "Traceback" in done.stderr  # the log keeps the whole story
    assert done.stderr.splitlines()[-1] == line
    assert error_file.read_text() == f"{line}\n"
    assert exit_file.read_text() == "1\n"


def test_a_replica_that_ends_well_writes_no_error_line(tmp_path: Path) -> None:
    script = "import sys\nfrom appliance.workers.__main__ import finish\n"
    script += "finish(0, None, '', sys.argv[1])"
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "e")], capture_output=True, timeout=60
    )
    assert done.returncode == 0 and not (tmp_path / "e").exists() and not done.stderr
