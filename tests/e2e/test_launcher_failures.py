"""A failure says why, as the launcher shows it: a model dir the job could not use is refused
at submit (nothing reserved, nothing started); a replica that fails gives its last error line
to the job's reason and to the launcher's last line."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.client import ApplianceClient
from tests.integration.coordinator.harness import RunningCoordinator, serving

PARAMS = Path(__file__).resolve().parents[2] / "examples" / "params_fc_mnist.yaml"


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[RunningCoordinator]:
    with serving(tmp_path / "data") as running:  # and no replica left behind
        yield running


def _launch(address: str, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "appliance.run", "--params", str(PARAMS), "--num_csx", "1",
            "--num_steps", "4", "--mode", "train", "--server", address, *extra]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("model_dir", ["/proc/mymodel", "a-file"])
def test_a_model_dir_the_job_cannot_use_is_refused_at_submit(
    coordinator: RunningCoordinator, tmp_path: Path, model_dir: str
) -> None:
    (tmp_path / "a-file").write_text("")
    given = model_dir if model_dir.startswith("/") else str(tmp_path / model_dir)
    done = _launch(coordinator.address, "--model_dir", given)

    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: model_dir {given} is not a directory a job may use: "
        + ("No such file or directory" if model_dir.startswith("/") else
           "a symbolic link on the way, or not a directory")
    ]  # fmt: skip
    with ApplianceClient(coordinator.address) as client:
        assert client.list_jobs(all=True) == []  # nothing stored, reserved or started


def test_a_failed_replicas_last_error_line_ends_the_launchers_output(
    coordinator: RunningCoordinator, tmp_path: Path
) -> None:
    junk = tmp_path / "checkpoint_2.npz"
    junk.write_bytes(b"PK\x03\x04 torn")  # a zip's start, so accepted; the chief cannot load it
    done = _launch(
        coordinator.address, "--model_dir", str(tmp_path / "out"),
        "--checkpoint_path", str(junk),
    )  # fmt: skip

    assert done.returncode == 1, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert " FAILED: replica chief-0 exited with exit code 1: " in last, last
    assert f"checkpoint {junk} cannot be read: " in last, last
    with ApplianceClient(coordinator.address) as client:
        (job,) = client.list_jobs(all=True)
        chief = next(r for r in client.get_job(job.id).replicas if r.name == "chief-0")
    assert job.reason_code == "ReplicaFailed" and last.endswith(job.reason)
    assert f"checkpoint {junk} cannot be read: " in chief.message
