"""The pipelined mode on real replica processes: one CS-2 holds the whole model, nothing streams.

Same model, data and seed: a pipelined job ends with exactly the weights of the single-process
reference and of the 1-CS-2 weight-streaming job, resumes exactly, evaluates, and reads its
input workers' batches; its gang is a chief and one CS-2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from appliance._proto.v1 import common_pb2
from appliance.domain.params import parse_params
from appliance.workers.models.reference import ReferenceTrainer
from tests.data_sets import write_digits
from tests.integration.test_workers import run_job
from tests.integration.test_workers_training import assert_same_weights, compare_weights
from tests.model_specs import ADAMW, FC, GPT, SGD, with_

PIPELINE = {"execution_strategy": "pipeline"}


def pipelined(params: dict[str, Any], **runconfig: Any) -> dict[str, Any]:
    return with_(params, runconfig={**PIPELINE, **runconfig})


@pytest.mark.parametrize("model", ["fc_mnist", "gpt2"])
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])  # adamw clips by the global norm
async def test_a_pipelined_job_ends_with_the_weights_of_the_reference_and_of_streaming(
    tmp_path: Path, model: str, optimizer: str
) -> None:
    params = with_(
        FC if model == "fc_mnist" else GPT, optimizer=SGD if optimizer == "sgd" else ADAMW
    )
    num_steps = 5
    here, streamed = tmp_path / "pipelined", tmp_path / "streamed"
    async with run_job(
        here, 1, 0, 0, num_steps, pipelined(params), model_dir=here / "model"
    ) as job:
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()
        assert sorted(job.processes) == ["chief-0", "cs2-0"]  # no MemoryX, no SwarmX
    async with run_job(streamed, 1, 1, 1, num_steps, params, model_dir=streamed / "model") as job:
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()
    reference = ReferenceTrainer(parse_params(params), num_steps)
    reference.train()
    compare_weights(here / "model" / "weights.npz", reference, exact=True)
    assert_same_weights(here / "model", streamed / "model")
    final = json.loads((here / "model" / "metrics.json").read_text())
    assert final["peak_weight_bytes"] == 4 * sum(
        a.size for tensors in reference.weights for a in tensors.values()
    )  # the whole model, on the wafer


async def test_a_resumed_pipelined_run_ends_as_an_uninterrupted_one(tmp_path: Path) -> None:
    params = pipelined(with_(GPT, optimizer=ADAMW), checkpoint_steps=4)
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    async with run_job(whole, 1, 0, 0, 8, params, model_dir=whole / "model") as job:
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()
    start = str(whole / "model" / "checkpoint_4.npz")
    again = with_(params, runconfig={"checkpoint_path": start})
    async with run_job(resumed, 1, 0, 0, 8, again, model_dir=resumed / "model") as job:
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()
    assert job.fake.progress[0].step > 4  # it did not start over
    assert_same_weights(whole / "model", resumed / "model")


async def test_a_pipelined_job_evaluates_as_the_reference(tmp_path: Path) -> None:
    params = pipelined(with_(FC, optimizer=SGD), eval_steps=3)
    async with run_job(tmp_path, 1, 0, 0, 6, params, mode=common_pb2.MODE_TRAIN_AND_EVAL) as job:
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()
    reference = ReferenceTrainer(parse_params(params), 6)
    reference.train()
    metrics = json.loads((tmp_path / "model" / "metrics.json").read_text())
    assert metrics["eval_loss"] == pytest.approx(reference.evaluate().loss, rel=1e-6)


async def test_a_pipelined_job_reads_its_input_workers_batches(tmp_path: Path) -> None:
    data, _ = write_digits(tmp_path / "digits", size=8)
    params = {
        "model": {"name": "fc_mnist", "input_size": 64, "hidden_sizes": [16], "num_classes": 10},
        "train_input": {
            "batch_size": 16,
            "data_dir": str(data),
            "data_processor": "MNISTDataProcessor",
        },
        "optimizer": SGD,
    }
    here, streamed = tmp_path / "pipelined", tmp_path / "streamed"
    async with run_job(here, 1, 0, 0, 6, pipelined(params), model_dir=here / "model") as job:
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()
        assert sorted(job.processes) == ["chief-0", "cs2-0", "worker-0"]
    async with run_job(streamed, 1, 1, 1, 6, params, model_dir=streamed / "model") as job:
        assert await job.exit_code("chief-0", within=60) == 0, job.logs()
    assert_same_weights(here / "model", streamed / "model")
