"""Training on real replica processes: N-CS-2 equivalence, clipping, checkpoints, modes, summaries.

Every job runs against the fake coordinator of tests/integration/test_workers.py and is compared
with the single-process reference trainer (appliance.workers.models.reference) or plain NumPy.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import numpy as np
import pytest

from appliance._proto.v1 import common_pb2
from appliance.domain.params import parse_params
from appliance.domain.restarts import EXIT_PEER_FAILED
from appliance.workers import checkpoints
from appliance.workers.models.model import backward_units, forward_units
from appliance.workers.models.reference import ReferenceTrainer
from tests.integration.test_workers import run_job
from tests.model_specs import ADAMW, BIG_LAYER, FC, GPT, SGD, with_


def assert_same_weights(mine: Path, theirs: Path) -> None:
    """The weights.npz of two model dirs, bit for bit."""
    with np.load(mine / "weights.npz") as a, np.load(theirs / "weights.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        for key in a.files:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def max_relative_difference(got: np.ndarray, expected: np.ndarray) -> float:
    return float(np.abs(got - expected).max() / max(np.abs(expected).max(), 1e-30))


def compare_weights(path: Path, reference: ReferenceTrainer, exact: bool) -> float:
    """Largest relative difference between weights.npz and the reference's weights."""
    worst = 0.0
    with np.load(path) as saved:
        for layer, tensors in enumerate(reference.weights):
            for name, expected in tensors.items():
                got = saved[f"{name}_{layer}"]
                assert got.shape == expected.shape
                if exact:
                    np.testing.assert_array_equal(got, expected, err_msg=f"{name}_{layer}")
                worst = max(worst, max_relative_difference(got, expected))
    return worst


@pytest.mark.parametrize("model", ["fc_mnist", "gpt2"])
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
@pytest.mark.parametrize(
    ("num_csx", "memoryx", "swarmx"),
    [(1, 1, 1), (2, 2, 1), pytest.param(4, 2, 2, marks=pytest.mark.slow)],
)
async def test_same_weights_on_1_2_and_4_cs2(
    tmp_path: Path, model: str, optimizer: str, num_csx: int, memoryx: int, swarmx: int
) -> None:
    params = with_(
        FC if model == "fc_mnist" else GPT, optimizer=SGD if optimizer == "sgd" else ADAMW
    )
    num_steps = 5
    async with run_job(tmp_path, num_csx, memoryx, swarmx, num_steps, params) as job:
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()
    reference = ReferenceTrainer(parse_params(params), num_steps)
    losses = reference.train()
    # One CS-2 runs exactly the reference's operations: bit for bit.
    worst = compare_weights(tmp_path / "model" / "weights.npz", reference, exact=num_csx == 1)
    print(f"{model}/{optimizer} on {num_csx} cs2: max relative difference {worst:.2e}")
    assert worst <= 1e-5
    assert job.fake.progress[-1].loss == pytest.approx(losses[-1], rel=1e-5)


@pytest.mark.parametrize(("num_csx", "memoryx"), [(1, 1), (2, 2)])
async def test_layers_bigger_than_a_chunk_train_like_the_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, num_csx: int, memoryx: int
) -> None:
    # At this size the BLAS thread count changes a product's rounding: replicas started with
    # two threads asked for, and this process's multi-threaded BLAS, still give the same bits
    # (appliance.workers.models.numerics).
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    num_steps = 3
    async with run_job(tmp_path, num_csx, memoryx, 1, num_steps, BIG_LAYER) as job:
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()
    reference = ReferenceTrainer(parse_params(BIG_LAYER), num_steps)
    reference.train()
    worst = compare_weights(tmp_path / "model" / "weights.npz", reference, exact=num_csx == 1)
    assert worst <= 1e-5


async def test_global_norm_clipping_matches_numpy(tmp_path: Path) -> None:
    """A tiny max norm over layers held by two MemoryXs scales every gradient by one factor."""
    max_norm, lr = 1e-3, 0.5
    params = with_(GPT, optimizer={"optimizer_type": "sgd", "learning_rate": lr,
                                   "max_gradient_norm": max_norm})  # fmt: skip
    async with run_job(tmp_path, 2, 2, 1, 1, params) as job:
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()

    trainer = ReferenceTrainer(parse_params(params), 1)
    model, initial = trainer.model, dict(enumerate(trainer.weights))
    batch = model.train_batch(0)
    outputs, caches = forward_units(model, initial, batch.inputs)
    head = model.head(outputs, initial, batch.targets, batch.targets.size, need_grad=True)
    grads = dict(backward_units(model, initial, caches, head))
    flat = np.concatenate(
        [g.astype(np.float64).ravel() for t in grads.values() for g in t.values()]
    )
    norm = np.linalg.norm(flat)
    assert norm > 100 * max_norm  # the test is only meaningful if clipping bites
    with np.load(tmp_path / "model" / "weights.npz") as saved:
        for layer, tensors in initial.items():
            for name, before in tensors.items():
                expected = before - lr * grads[layer][name] * (max_norm / norm)
                np.testing.assert_allclose(saved[f"{name}_{layer}"], expected, rtol=0, atol=1e-7)
                moved = np.abs(saved[f"{name}_{layer}"] - before).max()
                assert moved <= lr * max_norm * 1.0001


@pytest.mark.parametrize("data_plane", ["grpc", "shared-memory"])
async def test_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(
    tmp_path: Path, data_plane: str
) -> None:
    params = with_(GPT, optimizer=ADAMW, runconfig={"checkpoint_steps": 10})
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    transport = {"*": data_plane}
    async with run_job(
        whole, 2, 2, 1, 20, params, model_dir=whole / "model", data_plane=transport
    ) as job:
        assert await job.exit_code("chief-0", within=90) == 0, job.logs()
    assert sorted(p.name for p in (whole / "model").glob("checkpoint_*")) == [
        "checkpoint_10.npz",
        "checkpoint_20.npz",
    ]
    start = str(whole / "model" / "checkpoint_10.npz")
    params_resumed = with_(params, runconfig={"checkpoint_path": start})
    async with run_job(
        resumed, 2, 2, 1, 20, params_resumed, model_dir=resumed / "model", data_plane=transport
    ) as job:
        assert await job.exit_code("chief-0", within=90) == 0, job.logs()
    assert job.fake.progress[0].step > 10  # it did not start over
    assert_same_weights(whole / "model", resumed / "model")
    final = checkpoints.read_checkpoint(resumed / "model" / "checkpoint_20.npz")
    uninterrupted = checkpoints.read_checkpoint(whole / "model" / "checkpoint_20.npz")
    for layer, state in uninterrupted.states.items():
        for slot, tensors in state.items():
            for name, array in tensors.items():
                np.testing.assert_array_equal(final.states[layer][slot][name], array)


async def test_killed_cs2_leaves_the_last_checkpoint_intact_and_resumable(tmp_path: Path) -> None:
    params = with_(FC, optimizer={**SGD}, runconfig={"checkpoint_steps": 3})
    first = tmp_path / "first"
    async with run_job(first, 2, 1, 1, 1_000_000, params, model_dir=first / "model") as job:
        await job.fake.wait_until(lambda: any(p.step >= 8 for p in job.fake.progress), within=60)
        job.processes["cs2-1"].send_signal(signal.SIGKILL)
        assert await job.exit_code("chief-0", within=10) == EXIT_PEER_FAILED
    latest = checkpoints.latest_checkpoint(first / "model")
    assert latest is not None
    saved = checkpoints.read_checkpoint(latest)
    assert saved.step >= 6 and saved.step % 3 == 0
    target = saved.step + 4
    second = tmp_path / "second"
    resume = with_(params, runconfig={"checkpoint_path": str(latest)})
    async with run_job(second, 2, 1, 1, target, resume, model_dir=second / "model") as job:
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()
    reference = ReferenceTrainer(parse_params(params), target)
    reference.train()
    assert compare_weights(second / "model" / "weights.npz", reference, exact=False) <= 1e-5


async def test_train_and_eval_reports_metrics_and_summaries(tmp_path: Path) -> None:
    params = with_(GPT, optimizer=ADAMW, runconfig={"log_steps": 2, "eval_steps": 3})
    num_steps = 6
    async with run_job(
        tmp_path, 2, 1, 1, num_steps, params, mode=common_pb2.MODE_TRAIN_AND_EVAL
    ) as job:
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()
    reference = ReferenceTrainer(parse_params(params), num_steps)
    losses = reference.train()
    evaluation = reference.evaluate()
    model_dir = tmp_path / "model"
    metrics = json.loads((model_dir / "metrics.json").read_text())
    assert metrics["step"] == num_steps
    assert metrics["loss"] == pytest.approx(losses[-1], rel=1e-5)
    assert metrics["eval_loss"] == pytest.approx(evaluation.loss, rel=1e-5)
    assert metrics["eval_accuracy"] == pytest.approx(evaluation.accuracy, abs=1e-3)
    lines = [json.loads(line) for line in (model_dir / "metrics.jsonl").read_text().splitlines()]
    training = [line for line in lines if "loss" in line]
    assert [line["step"] for line in training] == [2, 4, 6]
    assert [line["learning_rate"] for line in training] == pytest.approx(
        [reference.learning_rates[i] for i in (1, 3, 5)]
    )
    assert all(line["samples_per_second"] > 0 for line in training)
    evaluations = [line for line in lines if "eval_loss" in line]  # as named in metrics.json
    assert [line["step"] for line in evaluations] == [3, 6]
    assert evaluations[-1]["eval_loss"] == metrics["eval_loss"]
    assert evaluations[-1]["eval_accuracy"] == metrics["eval_accuracy"]
    # The last report carries the final evaluation to whoever follows the job.
    last = job.fake.progress[-1]
    assert (last.step, last.eval_loss, last.eval_accuracy) == (
        num_steps,
        metrics["eval_loss"],
        metrics["eval_accuracy"],
    )
    assert list((model_dir / "train").glob("events.out.tfevents.*"))
    assert list((model_dir / "eval").glob("events.out.tfevents.*"))


async def test_eval_mode_evaluates_a_checkpoint_without_training(tmp_path: Path) -> None:
    params = with_(FC, optimizer=SGD, runconfig={"checkpoint_steps": 4})
    trained = tmp_path / "trained"
    async with run_job(trained, 1, 1, 1, 4, params, model_dir=trained / "model") as job:
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()
    evaluated = tmp_path / "evaluated"
    checkpoint = str(trained / "model" / "checkpoint_4.npz")
    eval_params = with_(params, runconfig={"checkpoint_path": checkpoint})
    async with run_job(
        evaluated, 2, 1, 1, 4, eval_params, mode=common_pb2.MODE_EVAL,
        model_dir=evaluated / "model",
    ) as job:  # fmt: skip
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()
    reference = ReferenceTrainer(parse_params(params), 4)
    reference.train()
    metrics = json.loads((evaluated / "model" / "metrics.json").read_text())
    assert metrics["step"] == 4
    assert metrics["eval_loss"] == pytest.approx(reference.evaluate().loss, rel=1e-5)
    assert not list((evaluated / "model").glob("checkpoint_*"))  # nothing trained, nothing saved


async def test_resuming_with_another_model_fails_the_job(tmp_path: Path) -> None:
    params = with_(FC, optimizer=SGD)
    async with run_job(
        tmp_path / "a", 1, 1, 1, 2, params, model_dir=tmp_path / "a" / "model"
    ) as job:
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()
    saved = str(tmp_path / "a" / "model" / "checkpoint_2.npz")
    other = with_(FC, model={"hidden_sizes": [16]}, runconfig={"checkpoint_path": saved})
    async with run_job(
        tmp_path / "b", 1, 1, 1, 4, other, model_dir=tmp_path / "b" / "model"
    ) as job:
        assert await job.exit_code("chief-0", within=60) == EXIT_PEER_FAILED
        assert "different `model` section" in job.logs()
