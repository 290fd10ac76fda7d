"""A model dir as a Model Zoo user reuses it, through `python -m appliance.run` against a real
`appliance serve` and its replicas: a second training run continues from the newest checkpoint (or
starts over when asked), `--mode eval` needs no --num_steps and evaluates the newest
checkpoint, and a job that cannot start is refused at submit with one line naming the field."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from appliance.client import ApplianceClient
from tests.e2e.conftest import Served
from tests.integration.coordinator.same_run import csctl

PARAMS = Path(__file__).resolve().parents[2] / "examples" / "params_fc_mnist.yaml"


def launch(
    address: str, model_dir: Path, mode: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "appliance.run", "--params", str(PARAMS), "--num_csx", "1",
            "--model_dir", str(model_dir), "--mode", mode, "--server", address,
            *extra]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def job_of(done: subprocess.CompletedProcess[str]) -> str:
    match = re.match(r"submitted (wsjob-\w+)", done.stdout)
    assert match, done.stdout
    return match.group(1)


def test_eval_and_a_second_run_use_the_newest_checkpoint_of_the_model_dir(
    serving: Served, tmp_path: Path
) -> None:
    address, out = serving.address, tmp_path / "out"
    refused = launch(address, out, "eval")
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.count("\n") == 1 and "model_dir" in refused.stderr, refused.stderr
    assert "submitted" not in refused.stdout

    trained = launch(address, out, "train", "--num_steps", "6")
    assert trained.returncode == 0, trained.stderr

    evaluated = launch(address, out, "eval")  # no --num_steps
    assert evaluated.returncode == 0, evaluated.stderr
    last = evaluated.stdout.splitlines()[-1]
    assert re.search(r"SUCCEEDED \(step 6/6 .*accuracy \S+%  over 128 samples\)", last), last
    with ApplianceClient(address) as client:
        job = client.get_job(job_of(evaluated))
    recorded = yaml.safe_load(job.spec.params_yaml)["runconfig"]["checkpoint_path"]
    assert recorded == str(out / "checkpoint_6.npz")  # what the job says it evaluated
    shown = csctl(address, "get", "job", job.id, "-o", "table")
    assert f"STARTS FROM: {recorded}" in shown and " 6/6 " in shown, shown

    again = launch(address, out, "train", "--num_steps", "6")
    assert again.returncode == 2 and "num_steps" in again.stderr, again.stderr

    more = launch(address, out, "train", "--num_steps", "10")
    assert more.returncode == 0, more.stderr
    with ApplianceClient(address) as client:
        job = client.get_job(job_of(more))
    assert job.progress.resumed_from_step == 6 and job.progress.step == 10

    over = launch(address, out, "train", "--num_steps", "4", "--autoload_last_checkpoint", "false")
    assert over.returncode == 0, over.stderr
    assert "step 4/4" in over.stdout
    assert sorted(p.name for p in (out / "earlier_runs" / "1").glob("checkpoint_*")) == [
        "checkpoint_10.npz", "checkpoint_6.npz",
    ]  # fmt: skip
