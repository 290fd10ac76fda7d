"""Params validation names the key; checkpoints round-trip and are written atomically."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from appliance.domain import model_shapes as models
from appliance.domain.errors import InvalidSpec
from appliance.domain.params import parse_params
from appliance.domain.spec import validate_params
from appliance.workers import checkpoints

GPT = {"model": {"name": "gpt2", "hidden_size": 64, "num_hidden_layers": 2, "num_heads": 4}}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"model": {}, "optimizer": {"learning_rate": -1}},
         "params: optimizer.learning_rate must be > 0, got -1"),
        ({"model": {}, "optimizer": {"lr": 0.1}}, "params: unknown key optimizer.lr"),
        ({"model": {"name": "gpt2", "hidden": 8}}, "params: unknown key model.hidden"),
        ({"model": {"name": "gpt2", "hidden_size": 10, "num_heads": 4}},
         "model.hidden_size (10) must be a multiple of model.num_heads (4)"),
        ({"model": {}, "runconfig": {"checkpoint_steps": 0}},
         "params: runconfig.checkpoint_steps must be > 0, got 0"),
        ({"model": {}, "optimizer": {"decay": "step"}}, "params: optimizer.decay 'step' is not"),
        ({"model": {}, "train_input": {"batch_size": "x"}},
         "params: train_input.batch_size must be an integer"),
        ({"model": {"name": "gpt2", "vocab_size": 255}},
         "params: model.vocab_size must be >= 256, got 255"),
    ],
)  # fmt: skip
def test_bad_params_name_the_key(params: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidSpec) as raised:
        parse_params(params)
    assert raised.value.field == "params"
    assert message in raised.value.message


def test_validate_params_checks_keys_through_the_spec() -> None:
    with pytest.raises(InvalidSpec, match=r"unknown key runconfig\.sed"):
        validate_params("model: {name: fc_mnist}\nrunconfig: {sed: 1}\n")


def test_gpt2_parameter_bytes() -> None:
    hidden, vocab, positions, layers = 64, 256, 128, 2
    block = 12 * hidden * hidden + 13 * hidden
    count = vocab * hidden + positions * hidden + layers * block + 2 * hidden
    assert models.parameter_count(GPT) == count
    adamw = {**GPT, "optimizer": {"optimizer_type": "adamw"}}
    assert models.memory_bytes(adamw) == count * 4 * 3


def _checkpoint(step: int) -> checkpoints.Checkpoint:
    weights = {0: {"weight": np.arange(6, dtype=np.float32).reshape(2, 3)}}
    states = {0: {"exp_avg": {"weight": np.ones((2, 3), np.float32)}}}
    return checkpoints.Checkpoint(step, "digest", "adamw", weights, states)


def test_checkpoint_round_trip_and_latest(tmp_path: Path) -> None:
    for step in (5, 10):
        checkpoints.write_checkpoint(tmp_path, _checkpoint(step))
    latest = checkpoints.latest_checkpoint(tmp_path)
    assert latest == tmp_path / "checkpoint_10.npz"
    loaded = checkpoints.read_checkpoint(latest)
    assert (loaded.step, loaded.params_digest, loaded.optimizer_type) == (10, "digest", "adamw")
    np.testing.assert_array_equal(loaded.weights[0]["weight"], _checkpoint(0).weights[0]["weight"])
    assert loaded.states[0]["exp_avg"]["weight"].sum() == 6
    assert not list(tmp_path.glob(".*"))  # no temporary files left


def test_torn_write_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    checkpoints.write_checkpoint(tmp_path, _checkpoint(5))
    (tmp_path / ".checkpoint_10.npz.123.tmp").write_bytes(b"PK\x03\x04 torn")  # killed mid-write
    assert checkpoints.latest_checkpoint(tmp_path) == tmp_path / "checkpoint_5.npz"
    (tmp_path / "checkpoint_7.npz").write_bytes(b"garbage")
    with pytest.raises(ValueError, match=r"is not an \.npz"):
        checkpoints.read_checkpoint(tmp_path / "checkpoint_7.npz")


def test_a_file_that_is_no_npz_is_named_so_without_numpys_pickle_advice(tmp_path: Path) -> None:
    # numpy says "If you trust the file you can load it unsafely using allow_pickle" (#32).
    garbage = tmp_path / "checkpoint_7.npz"
    for content in (b"garbage", b"\x80\x04pickled", b""):
        garbage.write_bytes(content)
        with pytest.raises(ValueError, match=r"is not an \.npz") as refused:
            checkpoints.read_checkpoint(garbage)
        assert "pickle" not in str(refused.value)


def test_incompatible_checkpoint_is_refused() -> None:
    with pytest.raises(ValueError, match="different `model` section"):
        checkpoints.check_compatible(_checkpoint(1), "other", "adamw")
    with pytest.raises(ValueError, match="holds adamw state"):
        checkpoints.check_compatible(_checkpoint(1), "digest", "sgd")


def test_a_checkpoint_keeps_the_input_position_and_an_older_one_still_loads(
    tmp_path: Path,
) -> None:
    where = checkpoints.DataPosition(epoch=3, offset=128, seed=7)
    with_position = dataclasses.replace(_checkpoint(4), input_position=where)
    loaded = checkpoints.read_checkpoint(checkpoints.write_checkpoint(tmp_path, with_position))
    assert loaded.input_position == where
    # Written before #33 (no input_position): the position follows from the step.
    older = checkpoints.read_checkpoint(checkpoints.write_checkpoint(tmp_path, _checkpoint(5)))
    assert older.input_position is None and older.step == 5


def test_a_malformed_input_position_is_refused(tmp_path: Path) -> None:
    path = checkpoints.write_checkpoint(tmp_path, _checkpoint(6))
    with np.load(path) as archive:
        arrays = {key: archive[key] for key in archive.files}
    np.savez(path, **arrays, input_position=np.array([1, -2, 3], np.int64))
    with pytest.raises(ValueError, match="input_position is not three non-negative"):
        checkpoints.read_checkpoint(path)
