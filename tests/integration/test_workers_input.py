"""Training on a real data set through real replica processes, input workers included.

scikit-learn's handwritten digits (1,797 8x8 images, a test-only dependency) written as MNIST
IDX files (tests/data_sets.py), split train/eval, read by the job's input workers and streamed
to the CS-2s: fc_mnist learns them to >= 0.95 eval accuracy; 1 and 2 CS-2s (and 2 workers per
CS-2) see the same global batches; a resumed run ends bitwise equal to an uninterrupted one; a
checkpoint whose input position the data set no longer gives is refused with a clear line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from appliance._proto.v1 import common_pb2
from appliance.domain.restarts import EXIT_PEER_FAILED
from appliance.workers import checkpoints
from tests.data_sets import write_digits
from tests.integration.test_workers import run_job
from tests.integration.test_workers_training import assert_same_weights
from tests.model_specs import with_


def digits_params(root: Path, **runconfig: Any) -> dict[str, Any]:
    train, evaluation = write_digits(root)  # 1,438 training and 359 evaluation images
    return {
        "model": {"name": "fc_mnist", "input_size": 64, "hidden_sizes": [128], "num_classes": 10},
        "train_input": {
            "data_dir": str(train),
            "data_processor": "MNISTDataProcessor",
            "batch_size": 64,
            "num_workers": 2,
        },
        "eval_input": {
            "data_dir": str(evaluation),
            "data_processor": "MNISTDataProcessor",
            "batch_size": 120,
            "num_batches": 3,  # all 359: the last batch short
            "drop_last_batch": False,
        },
        "optimizer": {"optimizer_type": "sgd", "learning_rate": 0.1, "momentum": 0.9},
        "runconfig": {"seed": 1, **runconfig},
    }


def input_wait(log: str) -> dict[str, float]:
    found = re.findall(r"input wait: (\{.*\})", log)
    assert len(found) == 1, log
    totals: dict[str, float] = json.loads(found[0])
    return totals


async def test_fc_mnist_learns_the_digits_from_its_input_workers(tmp_path: Path) -> None:
    params = digits_params(tmp_path / "digits")
    num_steps = 220  # 10 epochs of 22 batches
    async with run_job(
        tmp_path, 1, 1, 1, num_steps, params, mode=common_pb2.MODE_TRAIN_AND_EVAL
    ) as job:
        assert await job.exit_code("chief-0", within=120) == 0, job.logs()
    metrics = json.loads((tmp_path / "model" / "metrics.json").read_text())
    print(f"digits: eval accuracy {metrics['eval_accuracy']:.4f} loss {metrics['eval_loss']:.4f}"
          f" after {num_steps} steps")  # fmt: skip
    assert metrics["eval_accuracy"] >= 0.95
    wait = input_wait((job.log_dir / "cs2-0.log").read_text())
    assert wait["batches"] == num_steps
    assert 0 <= wait["wait_seconds"] <= wait["step_seconds"]
    saved = checkpoints.read_checkpoint(tmp_path / "model" / f"checkpoint_{num_steps}.npz")
    # 22 batches an epoch (drop_last): step 220's batch starts epoch 10.
    assert saved.input_position == checkpoints.DataPosition(10, 0, 1)


@pytest.mark.parametrize(("num_csx", "per_cs2"), [(2, 1), (2, 2)])
async def test_the_same_global_batches_on_one_cs2_and_on_several(
    tmp_path: Path, num_csx: int, per_cs2: int
) -> None:
    params = digits_params(tmp_path / "digits")
    num_steps = 30  # over an epoch's end (22 batches)
    losses: dict[int, list[float]] = {}
    for count, workers in ((1, 1), (num_csx, per_cs2)):
        run = tmp_path / f"on-{count}-{workers}"
        job_params = with_(params, runconfig={"num_workers_per_csx": workers})
        async with run_job(run, count, 1, 1, num_steps, job_params) as job:
            assert await job.exit_code("chief-0", within=90) == 0, job.logs()
        losses[count] = [p.loss for p in job.fake.progress]
        final = checkpoints.read_checkpoint(run / "model" / f"checkpoint_{num_steps}.npz")
        assert final.input_position == checkpoints.DataPosition(1, 8 * 64, 1)
    assert losses[num_csx][-1] == pytest.approx(losses[1][-1], rel=1e-5)


async def test_a_resumed_run_continues_with_the_next_batch_bitwise(tmp_path: Path) -> None:
    params = digits_params(tmp_path / "digits", checkpoint_steps=13)
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    num_steps = 30
    async with run_job(whole, 2, 1, 1, num_steps, params, model_dir=whole / "model") as job:
        assert await job.exit_code("chief-0", within=90) == 0, job.logs()
    start = whole / "model" / "checkpoint_26.npz"
    assert checkpoints.read_checkpoint(start).input_position == checkpoints.DataPosition(
        1, 4 * 64, 1
    )
    again = with_(params, runconfig={"checkpoint_path": str(start)})
    async with run_job(resumed, 2, 1, 1, num_steps, again, model_dir=resumed / "model") as job:
        assert await job.exit_code("chief-0", within=90) == 0, job.logs()
    assert job.fake.progress[0].step > 26  # it did not start over
    assert_same_weights(whole / "model", resumed / "model")


async def test_a_checkpoint_the_data_set_no_longer_matches_is_refused(tmp_path: Path) -> None:
    params = digits_params(tmp_path / "digits", checkpoint_steps=10)
    first = tmp_path / "first"
    async with run_job(first, 1, 1, 1, 30, params, model_dir=first / "model") as job:
        assert await job.exit_code("chief-0", within=90) == 0, job.logs()
    # Another shuffle seed: step 30's batch is elsewhere in another order.
    changed = with_(
        params,
        train_input={"shuffle_seed": 7},
        runconfig={"checkpoint_path": str(first / "model" / "checkpoint_30.npz")},
    )
    second = tmp_path / "second"
    async with run_job(second, 1, 1, 1, 40, changed, model_dir=second / "model") as job:
        assert await job.exit_code("chief-0", within=90) == 1, job.logs()
    last = (second / "logs" / "chief-0.log").read_text().strip().splitlines()[-1]
    assert "the data set changed since" in last
    assert "shuffle seed 1" in last and "shuffle seed 7" in last


async def test_a_worker_that_cannot_read_its_data_set_fails_with_the_reason(
    tmp_path: Path,
) -> None:
    params = digits_params(tmp_path / "digits")
    broken = Path(params["train_input"]["data_dir"]) / "train-images-idx3-ubyte"
    broken.write_bytes(broken.read_bytes()[:100])  # truncated
    async with run_job(tmp_path, 1, 1, 1, 10, params) as job:
        assert await job.exit_code("worker-0", within=60) == 1, job.logs()
        assert await job.exit_code("chief-0", within=60) in (1, EXIT_PEER_FAILED)
    last = (tmp_path / "logs" / "worker-0.log").read_text().strip().splitlines()[-1]
    assert last.startswith("DataError: ") and "train-images-idx3-ubyte" in last, last


async def test_samples_per_second_counts_the_samples_of_a_short_last_batch(
    tmp_path: Path,
) -> None:
    """1,438 training images in batches of 1,000 without drop_last_batch: steps of 1,000 and
    438 samples in turn; the 359 evaluation images in batches of 120, the last of 119."""
    params = with_(
        digits_params(tmp_path / "digits"),
        train_input={"batch_size": 1000, "drop_last_batch": False},
    )
    num_steps = 5
    async with run_job(
        tmp_path, 2, 1, 1, num_steps, params, mode=common_pb2.MODE_TRAIN_AND_EVAL
    ) as job:
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()
    samples = [1000 if step % 2 == 0 else 438 for step in range(num_steps)]
    reported = 0
    for progress in job.fake.progress:
        assert progress.steps_per_second > 0
        per_step = sum(samples[reported : progress.step]) / (progress.step - reported)
        assert progress.samples_per_second / progress.steps_per_second == pytest.approx(per_step)
        reported = progress.step
    assert reported == num_steps
    assert job.fake.progress[-1].eval_samples == 359
