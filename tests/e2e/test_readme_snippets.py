"""The README's Python snippets, run as a user runs them, against `appliance serve`."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

from appliance.client import ApplianceClient
from appliance.domain.phases import Phase
from tests.e2e.conftest import Served
from tests.integration.coordinator.harness import wait_until

REPO = Path(__file__).resolve().parents[2]


def heredoc_snippet(readme: str, needle: str) -> str:
    """The `python - <<'EOF'` block of the README that contains `needle`."""
    blocks = re.findall(r"python - <<'EOF'\n(.*?)\nEOF\n", readme, flags=re.DOTALL)
    (block,) = [b for b in blocks if needle in b]
    return str(block)


def python_block(readme: str, needle: str) -> str:
    """The ```python block of the README that contains `needle`."""
    blocks = re.findall(r"```python\n(.*?)\n```\n", readme, flags=re.DOTALL)
    (block,) = [b for b in blocks if needle in b]
    return str(block)


def test_the_client_example_runs_from_any_directory(serving: Served, tmp_path: Path) -> None:
    """Run where a user would paste it: not in the repository (a relative params path failed
    there with a traceback)."""
    snippet = python_block((REPO / "README.md").read_text(), 'labels={"team": "nlp"}')
    snippet = snippet.replace('"127.0.0.1:50051"', repr(serving.address))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", snippet], cwd=elsewhere, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert "SUCCEEDED: chief finished all steps (step 50/50" in done.stdout, done.stdout


def test_ctrl_c_in_the_kubernetes_client_snippet_cancels_the_job_at_once(
    serving: Served, tmp_path: Path
) -> None:
    """The README says Ctrl-C cancels the job; without the snippet's own cancel it would only
    let the lease lapse (cancelled 60 s later, "client lease expired")."""
    snippet = heredoc_snippet((REPO / "README.md").read_text(), "except KeyboardInterrupt")
    assert '"127.0.0.1:50051"' in snippet  # the port-forwarded coordinator
    snippet = snippet.replace('"127.0.0.1:50051"', repr(serving.address))
    snippet = snippet.replace("num_steps=200", "num_steps=1_000_000")  # still running at Ctrl-C
    proc = subprocess.Popen(
        [sys.executable, "-c", snippet], cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        submitted = proc.stdout.readline()
        assert submitted.startswith("submitted wsjob-"), submitted
        job_id = submitted.split()[1]
        with ApplianceClient(serving.address) as client:
            job = client.job(job_id)
            wait_until(lambda: job.status.phase is Phase.RUNNING, 60, "the job to run")
            proc.send_signal(signal.SIGINT)  # Ctrl-C
            out, err = proc.communicate(timeout=30)
            assert f"cancelled {job_id}" in out, f"stdout: {out}\nstderr: {err}"
            final = job.status
            assert final.phase is Phase.CANCELLED
            assert "Ctrl-C in the client" in final.reason, final.reason
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
