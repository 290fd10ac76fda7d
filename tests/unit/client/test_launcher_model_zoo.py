"""The launcher and the client take a Model Zoo user's command line and params as written (#32):
a leading CSX, runconfig.max_steps for --num_steps, runconfig.model_dir for --model_dir, the
model an example's run.py is for, and one `warning:` line per params key not used."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from fake_cluster_service import FakeCluster

from appliance._proto.v1 import cluster_pb2
from appliance.client import ApplianceClient
from appliance.client import launcher as run

WORKSHOP = """\
train_input: {batch_size: 32, shuffle: True}
model: {name: "fc_mnist", mixed_precision: True, hidden_sizes: [16]}
optimizer: {optimizer_type: "SGD", learning_rate: 0.01, loss_scaling_factor: 1.0}
runconfig: {max_steps: 7, save_losses: True, model_dir: "./model_dir"}
"""


@pytest.fixture
def workshop_params(tmp_path: Path) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(WORKSHOP)
    return path


def _submitted(cluster: FakeCluster) -> cluster_pb2.SubmitJobRequest:
    (request,) = cluster.service.requests_of("SubmitJob")
    assert isinstance(request, cluster_pb2.SubmitJobRequest)
    return request


def test_csx_first_and_runconfig_stand_in_for_num_steps_and_model_dir(
    cluster: FakeCluster, workshop_params: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()

    code = run.main(["CSX", "--params", "params.yaml", "--num_csx", "1", "--detach",
                     "--server", cluster.address], out=out)  # fmt: skip

    assert code == 0, capsys.readouterr().err
    request = _submitted(cluster)
    assert request.spec.num_steps == 7
    assert request.spec.model_dir == str(tmp_path / "model_dir")
    assert "(1 CS-2, 7 steps)" in out.getvalue()
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "warning: params: model.mixed_precision is accepted and not used: the emulation "
        "computes in float32 throughout",
    ]


def test_num_steps_and_model_dir_given_win(
    cluster: FakeCluster, workshop_params: Path, tmp_path: Path
) -> None:
    code = run.main(["csx", "--params", str(workshop_params), "--num_steps", "3",
                     "--model_dir", str(tmp_path / "mine"), "--detach",
                     "--server", cluster.address], out=io.StringIO())  # fmt: skip

    assert code == 0
    assert (_submitted(cluster).spec.num_steps, _submitted(cluster).spec.model_dir) == (
        3, str(tmp_path / "mine"),
    )  # fmt: skip


def test_without_num_steps_or_max_steps_the_launcher_says_which(
    cluster: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("model: {name: fc_mnist}\n")

    code = run.main(["--params", str(params), "--server", cluster.address], out=io.StringIO())

    assert code == 2
    assert "--num_steps is required" in capsys.readouterr().err
    assert cluster.service.requests_of("SubmitJob") == []


def test_cpu_is_accepted_with_a_warning_saying_where_the_job_runs(
    cluster: FakeCluster, workshop_params: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run.main(["CPU", "--params", str(workshop_params), "--detach",
                     "--server", cluster.address], out=io.StringIO())  # fmt: skip

    assert code == 0
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith("warning: CPU: there is no local run here") and "as with CSX" in first
    assert _submitted(cluster).spec.num_steps == 7


def test_an_examples_run_py_names_the_model_its_params_leave_out(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    params = tmp_path / "params_gpt2_small.yaml"
    params.write_text("model: {hidden_size: 16, num_heads: 2, num_hidden_layers: 1}\n")

    code = run.main(["CSX", "--params", str(params), "--num_steps", "2", "--detach",
                     "--server", cluster.address], out=io.StringIO(), model="gpt2")  # fmt: skip

    assert code == 0
    sent = yaml.safe_load(_submitted(cluster).spec.params_yaml)
    assert sent["model"] == {"name": "gpt2", "hidden_size": 16, "num_heads": 2,
                             "num_hidden_layers": 1}  # fmt: skip


def test_the_python_client_takes_max_steps_and_exposes_the_warnings(
    client: ApplianceClient, cluster: FakeCluster, workshop_params: Path
) -> None:
    job = client.submit(workshop_params, num_csx=1, model_dir="/tmp/out", detach=True)

    assert _submitted(cluster).spec.num_steps == 7
    assert [line.split(" is ")[0] for line in job.warnings] == ["params: model.mixed_precision"]


@pytest.mark.parametrize(
    ("text", "error"),
    [("model: " + "[" * 5000 + "]" * 5000 + "\n", "nests deeper than 64 levels"),
     ("model: {name: fc_mnist}\n# " + "x" * (1 << 20) + "\n", "is larger than 1048576 bytes")],
)  # fmt: skip
def test_an_examples_run_py_reads_the_params_file_bounded(
    cluster: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, error: str
) -> None:
    """run.py (model=...) reads the file itself: a deeply nested one was a RecursionError
    traceback, and --params /dev/zero a MemoryError (#32)."""
    params = tmp_path / "params.yaml"
    params.write_text(text)

    argv = ["CSX", "--params", str(params), "--num_steps", "2", "--detach",
            "--server", cluster.address]  # fmt: skip
    code = run.main(argv, out=io.StringIO(), model="fc_mnist")

    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: params file {params} ") and error in err, err
    assert err.count("\n") == 1
    assert cluster.service.requests_of("SubmitJob") == []


def test_a_mistyped_target_says_what_the_first_argument_is(
    cluster: FakeCluster, workshop_params: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`CXS` got click's `Got unexpected extra argument (CXS)`, no word of CSX."""
    code = run.main(["CXS\n", "--params", str(workshop_params), "--server", cluster.address])

    assert code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: 'CXS\\n' is not a target: the first argument is CSX (or CPU)")
    assert cluster.service.requests_of("SubmitJob") == []
