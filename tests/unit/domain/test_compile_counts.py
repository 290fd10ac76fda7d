"""A compile report says how many parameters a model has, as people say it."""

from __future__ import annotations

import pytest

from appliance.domain.compile import compile_job, count_in_words
from appliance.domain.errors import InsufficientCapacity
from appliance.domain.inventory import default_pool
from appliance.domain.spec import JobSpec, validate_spec
from appliance.domain.wafer import wafer_line


@pytest.mark.parametrize(
    ("count", "said"),
    [(987, "987"), (269_322, "269.3 K"), (124_439_808, "124.4 M"),
     (1_315_575_808, "1.32 B"), (175_000_000_000, "175.00 B")],
)  # fmt: skip
def test_a_count_reads_as_people_say_it(count: int, said: str) -> None:
    assert count_in_words(count) == said


def test_a_report_counts_every_layers_parameters_not_only_the_listed() -> None:
    spec = validate_spec(
        params_yaml={"model": {"name": "fc_mnist", "hidden_sizes": [2] * 1500}},
        num_csx=1, num_steps=1,
    )  # fmt: skip
    report = compile_job(spec, default_pool())
    assert report.parameter_count == 784 * 2 + 2 + 1499 * (2 * 2 + 2) + 2 * 10 + 10


ROOMY = default_pool(memoryx_bytes=64 << 30)  # MemoryX for the GPT-3 XL's 15.8 GB


def gpt_spec(strategy: str, num_csx: int = 1) -> JobSpec:
    """The talks' GPT-3 XL (1.3B) at batch 64 x 2048 tokens, AdamW."""
    params = {
        "model": {
            "name": "gpt2", "hidden_size": 2048, "num_hidden_layers": 24, "num_heads": 16,
            "vocab_size": 50257, "max_position_embeddings": 2048,
        },
        "train_input": {"batch_size": 64, "max_sequence_length": 2048},
        "optimizer": {"optimizer_type": "adamw", "learning_rate": 1e-4},
        "runconfig": {"execution_strategy": strategy},
    }  # fmt: skip
    return validate_spec(params_yaml=params, num_csx=num_csx, num_steps=1)


def test_weight_streaming_broadcasts_each_unit_twice_and_the_tied_head_once_more() -> None:
    report = compile_job(
        gpt_spec("weight_streaming", num_csx=2), default_pool(memoryx_bytes=64 << 30)
    )
    weights, embeddings = report.parameter_bytes, report.units[0].parameters * 4
    broadcast = 2 * weights + embeddings  # forward, the LM head (tied to wte), backward
    assert report.bytes_memoryx_to_swarmx == broadcast  # one SwarmX
    assert report.bytes_swarmx_to_cs2 == 2 * broadcast
    assert (report.bytes_cs2_to_swarmx, report.bytes_swarmx_to_memoryx) == (2 * weights, weights)


def test_a_report_says_what_the_wafer_holds_in_each_mode() -> None:
    report = compile_job(gpt_spec("weight_streaming"), ROOMY)
    assert report.wafer_bytes == 40 * 10**9
    assert wafer_line("pipelined", report.wafer_pipelined, report.wafer_bytes) == (
        "wafer (pipelined): 47.9 GB of 40.0 GB - does not fit (weights 5.3 GB, gradients 5.3 GB, "
        "optimizer state 10.5 GB, activations 26.8 GB)"
    )
    assert wafer_line("weight streaming", report.wafer_streaming, report.wafer_bytes) == (
        "wafer (weight streaming): 27.9 GB of 40.0 GB - fits (weights 0.6 GB, gradients 0.4 GB, "
        "optimizer state 0.0 GB, activations 26.8 GB)"
    )


def test_a_pipelined_job_moves_no_weights() -> None:
    spec = validate_spec(
        params_yaml={"model": {"name": "fc_mnist"},
                     "runconfig": {"execution_strategy": "pipeline"}},
        num_csx=1, num_steps=1,
    )  # fmt: skip
    report = compile_job(spec, default_pool())
    assert report.bytes_per_step == 0
    assert report.wafer_pipelined.total < report.wafer_bytes


def test_compile_refuses_a_pipelined_model_the_wafer_cannot_hold() -> None:
    with pytest.raises(
        InsufficientCapacity, match=r"needs 47\.9 GB on a CS-2's wafer in pipelined"
    ):
        compile_job(gpt_spec("pipeline"), default_pool(memoryx_bytes=64 << 30))
