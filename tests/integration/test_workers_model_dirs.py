"""A model dir as the Model Zoo uses it, on real replica processes: TensorBoard's files in
train/ and eval/ without runconfig.log_steps (read with TensorBoard's own reader), a second
training run continuing from the newest checkpoint (the earlier run's points past it purged),
starting over with runconfig.autoload_last_checkpoint: false, and --mode eval of the newest
checkpoint with no checkpoint_path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from appliance._proto.v1 import common_pb2
from appliance.domain.params import parse_params
from appliance.workers.models.reference import ReferenceTrainer
from tests.integration.test_workers import RunningJob, run_job
from tests.model_specs import FC, SGD, with_
from tests.unit.workers.test_summaries import scalars

PARAMS = with_(FC, optimizer=SGD, runconfig={"checkpoint_steps": 3})


def _weights(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as saved:
        return {key: saved[key] for key in saved.files}


async def _train(
    tmp_path: Path, steps: int, params: dict[str, Any], model_dir: Path
) -> RunningJob:
    """A training job of `steps` steps into `model_dir`, run to its end."""
    async with run_job(tmp_path, 1, 1, 1, steps, params, model_dir=model_dir) as job:
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()
    return job


def _reference_weights(steps: int) -> dict[str, np.ndarray]:
    reference = ReferenceTrainer(parse_params(PARAMS), steps)
    reference.train()
    return {f"{n}_{layer}": a for layer, t in enumerate(reference.weights) for n, a in t.items()}


async def test_train_and_eval_writes_tensorboard_files_without_log_steps(tmp_path: Path) -> None:
    async with run_job(tmp_path, 1, 1, 1, 5, PARAMS, mode=common_pb2.MODE_TRAIN_AND_EVAL) as job:
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()
    model_dir = tmp_path / "model"
    train = scalars(model_dir / "train")
    assert [step for step, _ in train["loss"]] == [1, 2, 3, 4, 5]  # a short run: every step
    assert {"learning_rate", "samples_per_second"} <= set(train)
    evaluation = scalars(model_dir / "eval")
    metrics = json.loads((model_dir / "metrics.json").read_text())
    assert evaluation["loss"] == [(5, pytest.approx(metrics["eval_loss"], rel=1e-6))]
    assert evaluation["eval/accuracy"] == [(5, pytest.approx(metrics["eval_accuracy"]))]
    lines = (model_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2, 3, 4, 5, 5]


async def test_a_second_run_into_a_model_dir_continues_from_its_newest_checkpoint(
    tmp_path: Path,
) -> None:
    model_dir = tmp_path / "model"
    await _train(tmp_path / "a", 7, PARAMS, model_dir)
    (model_dir / "checkpoint_7.npz").unlink()  # as if it had stopped after step 7's summary
    job = await _train(tmp_path / "b", 9, PARAMS, model_dir)
    assert job.fake.progress[0].resumed_from_step == 6
    expected = _reference_weights(9)  # as one run of 9 steps
    for key, array in _weights(model_dir / "weights.npz").items():
        np.testing.assert_allclose(array, expected[key], rtol=1e-5, err_msg=key)
    steps = [step for step, _ in scalars(model_dir / "train")["loss"]]
    assert steps == list(range(1, 10))  # step 7 of the first run purged, not shown twice
    lines = (model_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == list(range(1, 10))


async def test_autoload_last_checkpoint_false_starts_over_and_sets_the_earlier_run_aside(
    tmp_path: Path,
) -> None:
    model_dir = tmp_path / "model"
    await _train(tmp_path / "a", 6, PARAMS, model_dir)
    over = with_(PARAMS, runconfig={"autoload_last_checkpoint": False})
    job = await _train(tmp_path / "b", 4, over, model_dir)
    assert job.fake.progress[0].resumed_from_step == 0
    earlier = model_dir / "earlier_runs" / "1"
    assert sorted(p.name for p in earlier.glob("checkpoint_*")) == [
        "checkpoint_3.npz", "checkpoint_6.npz",
    ]  # fmt: skip
    assert sorted(p.name for p in model_dir.glob("checkpoint_*")) == [
        "checkpoint_3.npz", "checkpoint_4.npz",
    ]  # fmt: skip
    assert json.loads((model_dir / "metrics.json").read_text())["step"] == 4
    assert [s for s, _ in scalars(model_dir / "train")["loss"]] == [1, 2, 3, 4]
    assert [s for s, _ in scalars(earlier / "train")["loss"]] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("eval_steps", [None, 3])
async def test_eval_evaluates_the_newest_checkpoint_of_its_model_dir(
    tmp_path: Path, eval_steps: int | None
) -> None:
    model_dir = tmp_path / "model"
    await _train(tmp_path / "a", 6, PARAMS, model_dir)
    trained = json.loads((model_dir / "metrics.json").read_text())
    params = with_(PARAMS, runconfig={"eval_steps": eval_steps}) if eval_steps else PARAMS
    async with run_job(
        tmp_path / "b", 1, 1, 1, 1, params, mode=common_pb2.MODE_EVAL, model_dir=model_dir
    ) as job:
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()
    last = job.fake.progress[-1]
    batches = eval_steps or FC["eval_input"]["num_batches"]
    assert (last.step, last.num_steps) == (6, 6)  # the weights of step 6, not "6/1"
    assert last.eval_samples == batches * FC["eval_input"]["batch_size"]
    reference = ReferenceTrainer(parse_params(PARAMS), 6)
    reference.train()
    if eval_steps is None:
        assert last.eval_loss == pytest.approx(reference.evaluate().loss, rel=1e-5)
    assert scalars(model_dir / "eval")["loss"] == [(6, pytest.approx(last.eval_loss, rel=1e-6))]
    assert [s for s, _ in scalars(model_dir / "train")["loss"]] == list(range(1, 7))
    assert not (model_dir / "earlier_runs").exists()
    assert trained["step"] == 6
