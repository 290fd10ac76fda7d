"""The Cerebras workshop's command line, verbatim, from an example's model directory (#32):

    python run.py CSX --params params.yaml --num_csx 1 --num_steps 100 \\
        --model_dir model_dir --mode train

against a real `appliance serve`, with the workshop's fc_mnist params as they are; the Model
Zoo's GPT-2 small config, as it is, compiles from the gpt2 directory."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.e2e.conftest import BIN, Served

EXAMPLES = Path(__file__).resolve().parents[2] / "appliance" / "examples"
WORKSHOP = ["CSX", "--params", "params.yaml", "--num_csx", "1", "--num_steps", "100",
            "--model_dir", "model_dir", "--mode", "train"]  # fmt: skip


def _model_directory(name: str, tmp_path: Path) -> Path:
    """The example's directory as a user copies it: run.py, params.yaml, configs/."""
    where = tmp_path / name
    shutil.copytree(EXAMPLES / name, where, symlinks=True)
    return where


def _run(args: list[str], cwd: Path, served: Served) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CSCTL_SERVER": served.address}
    env.pop("PYTHONPATH", None)  # the appliance as installed in the venv, not this checkout
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_workshops_command_line_trains_fc_mnist_from_its_model_directory(
    serving: Served, tmp_path: Path
) -> None:
    here = _model_directory("fc_mnist", tmp_path)

    done = _run(["run.py", *WORKSHOP], here, serving)

    assert done.returncode == 0, done.stderr
    job_id = re.match(r"submitted (wsjob-\w+) \(1 CS-2, 100 steps\)", done.stdout)
    assert job_id, done.stdout
    assert "RUNNING -> SUCCEEDED" in done.stdout
    assert f"outputs in {here / 'model_dir'}" in done.stdout
    assert (here / "model_dir" / "checkpoint_100.npz").is_file()
    # Each key the emulation does not use: one warning line, on stderr, and only there.
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning: ")]
    keys = [line.split()[2] for line in warnings]
    # The workshop's own loader's seed and image_size; its eval data set is not read in train
    # mode (as the Model Zoo's run.py does not), so its absence is no error.
    assert sorted(keys) == sorted(
        ["model.mixed_precision", *(f"{s}.{k}" for s in ("train_input", "eval_input")
                                    for k in ("seed", "image_size"))]
    )  # fmt: skip
    assert "is accepted and not used" not in done.stdout
    # The job's events record them for anyone who looks later.
    events = subprocess.run(
        [BIN / "csctl", "--server", serving.address, "events", job_id.group(1)],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert events.count("is accepted and not used") == len(keys) == 5


def test_without_num_steps_runconfig_max_steps_is_the_length(
    serving: Served, tmp_path: Path
) -> None:
    here = _model_directory("fc_mnist", tmp_path)
    params = here / "configs" / "params.yaml"
    params.write_text(params.read_text().replace("max_steps: 1000", "max_steps: 12"))

    done = _run(["run.py", "CSX", "--params", "params.yaml", "--model_dir", "out"], here, serving)

    assert done.returncode == 0, done.stderr
    assert "(1 CS-2, 12 steps)" in done.stdout and "step 12/12" in done.stdout


def test_the_model_zoos_gpt2_small_compiles_from_the_gpt2_directory(
    serving: Served, tmp_path: Path
) -> None:
    here = _model_directory("gpt2", tmp_path)

    done = _run(["run.py", "CSX", "--params", "configs/params_gpt2_small.yaml", "--num_csx", "1",
                 "--mode", "compile"], here, serving)  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("model gpt2: 14 streamed layers")
    assert "wte[50257, 768]" in done.stdout and "mlp_fc_weight[768, 3072]" in done.stdout
    assert "warning: params: model.dropout_rate is accepted" in done.stderr
