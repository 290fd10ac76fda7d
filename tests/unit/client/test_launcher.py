"""`python -m appliance.run` (appliance/client/launcher.py), in-process, against the fake
ClusterService."""

from __future__ import annotations

import io
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import click
import pytest
import yaml
from fake_cluster_service import FakeCluster

from appliance._proto.v1 import cluster_pb2
from appliance.client import launcher as run
from appliance.domain.phases import Phase
from appliance.domain.spec import Mode


def _launch(cluster: FakeCluster, params_file: Path, *extra: str) -> tuple[int, str]:
    out = io.StringIO()
    argv = ["--params", str(params_file), "--num_csx", "2", "--num_steps", "10",
            "--server", cluster.address, *extra]  # fmt: skip
    return run.main(argv, out=out), out.getvalue()


def _submitted(cluster: FakeCluster) -> cluster_pb2.SubmitJobRequest:
    (request,) = cluster.service.requests_of("SubmitJob")
    assert isinstance(request, cluster_pb2.SubmitJobRequest)
    return request


@pytest.fixture
def drive(cluster: FakeCluster) -> Iterator[Callable[[Callable[[str], None]], None]]:
    """Runs `step(job_id)` in a thread once the launcher watches its job."""
    threads: list[threading.Thread] = []

    def start(step: Callable[[str], None]) -> None:
        def body() -> None:
            cluster.service.wait_for_request("WatchJob")
            step(next(iter(cluster.service.jobs)))

        thread = threading.Thread(target=body, daemon=True)
        thread.start()
        threads.append(thread)

    yield start
    for thread in threads:
        thread.join(10)


def test_detach_submits_without_a_lease_prints_the_id_and_exits_0(
    cluster: FakeCluster, params_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    extra = ["--detach", "--model_dir", "out", "--job_labels", "team=nlp", "run=7",
             "--job_queue", "nlp", "--depends_on", "wsjob-0123456789abcd",
             "afterany:wsjob-0123456789abce"]  # fmt: skip
    code, output = _launch(cluster, params_file, *extra, "--job_priority", "p1")

    request = _submitted(cluster)
    (job_id,) = cluster.service.jobs
    assert code == 0
    assert f"submitted {job_id}" in output and f"csctl events {job_id} -f" in output
    assert request.lease_seconds == 0.0
    assert request.spec.model_dir == str(tmp_path / "out")
    assert dict(request.spec.labels) == {"team": "nlp", "run": "7"}
    assert request.spec.priority == 2  # PRIORITY_P1
    assert request.spec.queue == "nlp"
    assert list(request.spec.depends_on) == [
        "afterok:wsjob-0123456789abcd", "afterany:wsjob-0123456789abce",
    ]  # fmt: skip
    assert cluster.service.requests_of("WatchJob") == []


def test_checkpoint_path_goes_into_the_params_runconfig(
    cluster: FakeCluster, params_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    code, _ = _launch(cluster, params_file, "--detach", "--checkpoint_path", "ckpt/c_5.npz")

    params = yaml.safe_load(_submitted(cluster).spec.params_yaml)
    assert code == 0
    assert params["runconfig"]["checkpoint_path"] == str(tmp_path / "ckpt" / "c_5.npz")
    assert params["model"] == yaml.safe_load(params_file.read_text())["model"]


def test_eval_needs_no_num_steps_and_starting_over_goes_into_the_runconfig(
    cluster: FakeCluster, params_file: Path
) -> None:
    out = io.StringIO()
    argv = ["--params", str(params_file), "--mode", "eval", "--detach",
            "--server", cluster.address]  # fmt: skip
    assert run.main(argv, out=out) == 0
    assert "(1 CS-2, eval)" in out.getvalue()
    assert _submitted(cluster).spec.mode == 2  # MODE_EVAL

    code, _ = _launch(cluster, params_file, "--detach", "--autoload_last_checkpoint", "false")
    _, request = cluster.service.requests_of("SubmitJob")
    assert isinstance(request, cluster_pb2.SubmitJobRequest)
    assert code == 0
    assert yaml.safe_load(request.spec.params_yaml)["runconfig"] == {
        "autoload_last_checkpoint": False
    }


@pytest.mark.parametrize(
    "extra",
    [("--job_labels", "team"), ("--num_csx", "0"), ("--job_priority", "urgent"),
     ("--params", "/nonexistent/params.yaml"), ("--job_queue", "Not A Queue"),
     ("--depends_on", "afterwards:wsjob-0123456789abcd"), ("--depends_on", "job-7")],
)  # fmt: skip
def test_bad_input_exits_2_without_submitting(
    cluster: FakeCluster,
    params_file: Path,
    extra: tuple[str, ...],
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _ = _launch(cluster, params_file, *extra)

    assert code == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert cluster.service.requests_of("SubmitJob") == []


def test_follows_the_job_and_exits_0_when_it_succeeds(
    cluster: FakeCluster, params_file: Path, drive: Callable[[Callable[[str], None]], None]
) -> None:
    def succeed(job_id: str) -> None:
        cluster.service.transition(job_id, Phase.RUNNING)
        cluster.service.report_progress(job_id, 10)
        cluster.service.transition(job_id, Phase.SUCCEEDED)

    drive(succeed)
    code, output = _launch(cluster, params_file)

    assert code == 0, output
    assert _submitted(cluster).lease_seconds == 60.0
    assert "QUEUED -> RUNNING" in output and "step 10/10" in output
    # No --model_dir: the appliance picks the user's own directory, and the end says where.
    assert _submitted(cluster).spec.model_dir == ""
    assert "SUCCEEDED (step 10/10  loss 0.0000); outputs in " in output.splitlines()[-1]


def test_a_failed_job_exits_1_with_its_reason(
    cluster: FakeCluster, params_file: Path, drive: Callable[[Callable[[str], None]], None],
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    drive(lambda job_id: cluster.service.transition(job_id, Phase.FAILED, "cs2-0 exited 3"))

    code, _ = _launch(cluster, params_file)

    assert code == 1
    assert "FAILED: cs2-0 exited 3" in capsys.readouterr().err


def test_a_reason_from_someone_else_cannot_drive_the_terminal(
    cluster: FakeCluster, params_file: Path, drive: Callable[[Callable[[str], None]], None],
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """A group member may cancel the job with any reason; the owner's launcher prints it."""
    hostile = "\x1b]0;owned\x07\x1b[31mred"
    drive(lambda job_id: cluster.service.transition(job_id, Phase.CANCELLED, hostile))

    code, output = _launch(cluster, params_file)

    err = capsys.readouterr().err
    assert code == 1 and "\\x1b]0;owned\\x07\\x1b[31mred" in err
    assert "\x1b" not in err + output and "\x07" not in err + output


def test_ctrl_c_cancels_the_job_and_exits_130(
    cluster: FakeCluster, params_file: Path, drive: Callable[[Callable[[str], None]], None]
) -> None:
    drive(lambda job_id: os.kill(os.getpid(), signal.SIGINT))
    before = signal.getsignal(signal.SIGINT)

    code, output = _launch(cluster, params_file)

    (job,) = cluster.service.jobs.values()
    assert code == 130
    assert (job.phase, job.reason) == (Phase.CANCELLED, run.CANCEL_REASON)
    assert f"{job.id} cancelled" in output
    assert signal.getsignal(signal.SIGINT) is before


def test_every_option_has_help_and_mode_says_what_each_does() -> None:
    """One CLI library (click) for every command line, and help on every option."""
    assert isinstance(run.launch, click.Command)
    options = [p for p in run.launch.params if isinstance(p, click.Option)]
    assert len(options) >= 16
    assert [o.name for o in options if not o.help] == []
    (mode,) = [o for o in options if o.name == "mode"]
    assert mode.help is not None
    assert all(m.value in mode.help for m in Mode)


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert run.main(["--help"]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("Usage: python -m appliance.run [OPTIONS]")
    assert "--job_labels K=V" in shown and "train_and_eval" in shown


def test_values_after_a_variadic_option_are_each_its_own() -> None:
    """The Model Zoo's spelling: --job_labels a=1 b=2 gives both, up to the next option."""
    spread = run.spread_variadic(
        ["--job_labels", "a=1", "b=2", "--detach", "--depends_on", "wsjob-1", "afterany:wsjob-2",
         "--num_csx", "2"]
    )  # fmt: skip
    assert spread == [
        "--job_labels", "a=1", "--job_labels", "b=2", "--detach",
        "--depends_on", "wsjob-1", "--depends_on", "afterany:wsjob-2", "--num_csx", "2",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "argv",
    [[], ["--params", "p.yaml"], ["--params", "p.yaml", "--num_steps", "x"],
     ["--params", "p.yaml", "--num_steps", "1", "--mode", "fly"],
     ["--params", "p.yaml", "--num_steps", "1", "stray"]],
)  # fmt: skip
def test_a_command_line_that_is_not_one_exits_2_with_one_error_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.endswith("(see --help)\n") and err.count("\n") == 1
