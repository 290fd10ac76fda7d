"""A researcher's own data through the whole appliance (#33): the coordinator plans input
workers for a job whose params name a data_dir, the local backend starts them beside the CS-2s,
and they stream the user's files: the workshop's fc_mnist params, with its data dirs pointing at
real handwritten digits written as MNIST files, train to >= 0.95 eval accuracy; a job preempted
on a data set resumes with the very next batch and ends bitwise equal to a run nobody
interrupted; a corrupt file fails the job with a reason naming it, and nothing else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance.client import ApplianceClient
from appliance.client.errors import JobFailed
from appliance.domain.phases import Phase
from tests.data_sets import write_digits
from tests.integration.coordinator.harness import RunningCoordinator, serving, wait_until
from tests.integration.coordinator.same_run import assert_same_run

ROOT = Path(__file__).resolve().parents[3]
WORKSHOP = ROOT / "appliance" / "examples" / "fc_mnist" / "configs" / "params.yaml"


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[RunningCoordinator]:
    with serving(tmp_path / "data") as running:
        yield running


@pytest.fixture
def digits(tmp_path: Path) -> tuple[Path, Path]:
    """The digits as 28x28 MNIST files (the workshop's input_size 784): (train, val)."""
    return write_digits(tmp_path / "mnist", size=28)


def workshop_params(train: Path, evaluation: Path) -> dict[str, Any]:
    """The workshop's params as written, with its data dirs pointing at the digits."""
    params: dict[str, Any] = yaml.safe_load(WORKSHOP.read_text())
    params["train_input"]["data_dir"] = str(train)
    # No num_batches: an evaluation is one pass over the eval set, as the Model Zoo's; all 359
    # held-out digits in two full batches and a short last one.
    params["eval_input"].update(data_dir=str(evaluation), drop_last_batch=False)
    return params


def test_the_workshops_params_learn_real_digits_through_the_appliance(
    coordinator: RunningCoordinator, digits: tuple[Path, Path]
) -> None:
    params = workshop_params(*digits)
    with ApplianceClient(coordinator.address, detach=True) as client:
        job = client.submit(params=params, num_csx=2, mode="train_and_eval")
        done = job.wait(timeout=300)
        replicas = client.get_job(job.id).replicas

    assert done.phase is Phase.SUCCEEDED, done.reason
    progress = done.progress
    print(f"workshop params on the digits: step {progress.step}, eval accuracy "
          f"{progress.eval_accuracy:.4f}, eval loss {progress.eval_loss:.4f}")  # fmt: skip
    assert progress.step == 1000 and progress.eval_accuracy >= 0.95
    assert progress.eval_samples == 359
    workers = sorted(r.name for r in replicas if r.name.startswith("worker-"))
    assert workers == ["worker-0", "worker-1"]  # one per CS-2 (num_workers_per_csx: 1)
    assert {r.node for r in replicas if r.name in workers} <= {"worker-01", "worker-02"}


STEPS = 300
DATA_PARAMS: dict[str, Any] = {
    "model": {"name": "fc_mnist", "input_size": 784, "hidden_sizes": [32]},
    "train_input": {"batch_size": 64, "shuffle": True, "shuffle_seed": 3},
    "optimizer": {"optimizer_type": "sgd", "learning_rate": 0.05, "momentum": 0.9},
    "runconfig": {"checkpoint_steps": 100, "log_steps": 10, "seed": 5},
}
URGENT = {"model": {"name": "fc_mnist", "hidden_sizes": [8]}, "runconfig": {"seed": 6}}


def test_a_job_preempted_on_a_data_set_resumes_with_the_very_next_batch(
    coordinator: RunningCoordinator, digits: tuple[Path, Path]
) -> None:
    params = {
        **DATA_PARAMS,
        "train_input": {**DATA_PARAMS["train_input"], "data_dir": str(digits[0])},
    }
    with ApplianceClient(coordinator.address, detach=True) as client:
        reference = client.submit(params=params, num_csx=4, num_steps=STEPS, priority="p3")
        uninterrupted = reference.wait(timeout=150)
        assert uninterrupted.phase is Phase.SUCCEEDED, uninterrupted.reason

        victim = client.submit(params=params, num_csx=4, num_steps=STEPS, priority="p3")
        wait_until(lambda: victim.status.progress.step >= 30, 90, "the P3 job to train")
        urgent = client.submit(params=URGENT, num_csx=2, num_steps=50, priority="p1")
        assert urgent.wait(timeout=120).phase is Phase.SUCCEEDED
        final = victim.wait(timeout=150)

    assert final.phase is Phase.SUCCEEDED, final.reason
    first, second = final.attempts
    # Resumed from where it was stopped (not step 0), in an epoch of 22 batches of 64: the
    # workers' order (epoch, offset, seed) continues from the checkpoint's input position.
    assert first.resumed_from == 0 and second.resumed_from >= 30
    assert_same_run(Path(final.spec.model_dir), Path(uninterrupted.spec.model_dir), STEPS)


def test_a_corrupt_data_file_fails_the_job_naming_it_and_only_that_job(
    coordinator: RunningCoordinator, digits: tuple[Path, Path], tmp_path: Path
) -> None:
    train, _ = digits
    images = train / "train-images-idx3-ubyte"
    images.write_bytes(images.read_bytes()[:-1000])  # truncated, as a half-copied file is
    params = {**DATA_PARAMS, "train_input": {**DATA_PARAMS["train_input"], "data_dir": str(train)}}
    with ApplianceClient(coordinator.address, detach=True) as client:
        bad = client.submit(params=params, num_csx=1, num_steps=20)
        good = client.submit(params=URGENT, num_csx=1, num_steps=20)
        with pytest.raises(JobFailed) as raised:
            bad.wait(timeout=120)
        fine = good.wait(timeout=120)

    failed = raised.value.job
    assert failed.reason.startswith("replica worker-0 exited with exit code 1: DataError: ")
    assert f"{images} is truncated" in failed.reason, failed.reason
    assert fine.phase is Phase.SUCCEEDED, fine.reason
    model_dir = Path(failed.spec.model_dir)
    assert not list(model_dir.glob("checkpoint_*.npz"))  # nothing half-written
