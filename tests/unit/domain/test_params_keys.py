"""Params as a Model Zoo user writes them: the workshop's and the Model Zoo's configs are accepted,
each key implemented or named in one warning; unknown keys are all named in one error, each with
the closest known key; the README's table lists exactly the code's keys (#32)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance.client.params import load_params_yaml
from appliance.domain.errors import InvalidSpec
from appliance.domain.params import (
    FcMnistModel,
    Gpt2Model,
    InputSection,
    OptimizerSection,
    RunConfig,
    _Section,
    parse_params,
)
from appliance.domain.params_keys import KNOWN_KEYS, MAX_UNKNOWN_SHOWN, Treatment, notes_of
from appliance.domain.reasons import ReasonCode
from appliance.domain.spec import validate_params

USED = Treatment.USED

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "appliance" / "examples"

# The Model Zoo's modelzoo/fc_mnist/pytorch/configs/params.yaml, as it is.
MODEL_ZOO_FC_MNIST = """
train_input:
    data_dir: "./data/mnist/train"
    batch_size: 128
    drop_last_batch: True
    shuffle: True

eval_input:
    data_dir: "./data/mnist/val"
    batch_size: 128
    drop_last_batch: True
    shuffle: False

model:
    name: "fc_mnist"
    mixed_precision: True
    depth: 10
    hidden_size: 50
    dropout: 0.0
    activation_fn: "relu"

optimizer:
    optimizer_type: "SGD"
    learning_rate: 0.001
    momentum: 0.9
    loss_scaling_factor: 1.0

runconfig:
    max_steps: 10000
    checkpoint_steps: 2000
    log_steps: 50
    seed: 1
    save_losses: True
"""

# The workshop's own data loader's keys, which ours does without.
_UNUSED_INPUT = ("seed", "image_size")


def _checked(text: str, model: str | None = None) -> dict[str, Any]:
    """The params as the launcher sends them (an example's run.py names the model)."""
    loaded = yaml.safe_load(text)
    if model is not None:
        loaded["model"].setdefault("name", model)
    return validate_params(load_params_yaml(loaded))  # a relative data_dir made absolute


def _warned(params: dict[str, Any]) -> set[str]:
    return {note.key for note in notes_of(params)}


def test_the_workshops_fc_mnist_params_are_accepted_with_a_warning_per_unused_key() -> None:
    params = _checked((EXAMPLES / "fc_mnist" / "configs" / "params.yaml").read_text())

    typed = parse_params(params)

    assert typed.runconfig.max_steps == 1000
    assert typed.optimizer.optimizer_type == "sgd"  # written "SGD"
    assert _warned(params) == {
        "model.mixed_precision",
        *(f"{s}.{k}" for s in ("train_input", "eval_input") for k in _UNUSED_INPUT),
    }  # loss_scaling_factor 1.0 and save_losses True ask for what the emulation does


def test_the_model_zoos_fc_mnist_config_is_accepted_and_its_depth_is_implemented() -> None:
    params = _checked(MODEL_ZOO_FC_MNIST)

    typed = parse_params(params)

    assert isinstance(typed.model, FcMnistModel)
    assert typed.model.hidden_sizes == (50,) * 10
    assert (typed.optimizer.momentum, typed.runconfig.max_steps) == (0.9, 10000)
    assert typed.train_input.data_dir == str(Path.cwd() / "data" / "mnist" / "train")
    assert (typed.train_input.shuffle, typed.eval_input.shuffle) == (True, False)
    # dropout 0.0 and activation_fn relu are what the emulation does
    assert _warned(params) == {"model.mixed_precision"}


def test_the_model_zoos_gpt2_small_config_is_accepted_with_its_schedule_and_vocabulary() -> None:
    text = (EXAMPLES / "gpt2" / "configs" / "params_gpt2_small.yaml").read_text()
    params = _checked(text, model="gpt2")

    typed = parse_params(params)

    assert isinstance(typed.model, Gpt2Model)
    assert (typed.model.vocab_size, typed.model.inner_size) == (50257, 3072)
    assert (typed.optimizer.beta1, typed.optimizer.beta2) == (0.9, 0.95)
    schedule = typed.optimizer.learning_rate
    assert isinstance(schedule, tuple)
    assert [(s.scheduler, s.total_iters) for s in schedule] == [
        ("linear", 1600),
        ("linear", 150000),
    ]
    assert (typed.runconfig.max_steps, typed.runconfig.model_dir) == (151600, "./model_dir")
    warned = _warned(params)
    assert {
        "model.mixed_precision", "model.dropout_rate", "model.attention_dropout_rate",
        "optimizer.initial_loss_scale", "optimizer.max_loss_scale",
        "runconfig.save_initial_checkpoint",
    } <= warned  # fmt: skip
    assert typed.train_input.data_processor == "GptHDF5DataProcessor"
    # Values that ask for what the emulation does give no warning.
    assert not warned & {"model.share_embedding_weights", "model.nonlinearity",
                         "model.layer_norm_epsilon", "model.use_bias_in_output"}  # fmt: skip
    # Every key of the file has its row, and is used, warned about, or asks for what the
    # emulation does: none silently ignored.
    for section, values in yaml.safe_load(text).items():
        for key, value in values.items():
            row = next(k for k in KNOWN_KEYS if k.path == f"{section}.{key}")
            assert row.treatment is USED or row.path in warned or not row.warns_for(value)


def test_a_warning_is_one_line_naming_the_key_and_what_the_emulation_does() -> None:
    (note,) = notes_of(validate_params("model: {name: fc_mnist, mixed_precision: true}\n"))

    assert note.reason.code is ReasonCode.PARAMS_WARNING
    assert str(note) == (
        "params: model.mixed_precision is accepted and not used: "
        "the emulation computes in float32 throughout"
    )
    assert notes_of(validate_params("model: {name: fc_mnist, mixed_precision: false}\n")) == ()


def test_runconfig_model_dir_warns_only_where_nothing_uses_it() -> None:
    params = validate_params("model: {name: fc_mnist}\nrunconfig: {model_dir: ./out}\n")

    assert [n.key for n in notes_of(params, "")] == ["runconfig.model_dir"]
    assert notes_of(params, "/home/me/out") == ()


def test_every_unknown_key_is_named_in_one_error_with_the_closest_known_key() -> None:
    params = {
        "model": {"name": "fc_mnist", "hiden_sizes": [8]},
        "optimizer": {"learnig_rate": 0.1, "max_steps": 3},
        "runconfig": {"zzz": 1},
    }

    with pytest.raises(InvalidSpec) as raised:
        parse_params(params)

    assert raised.value.field == "params"
    assert raised.value.message == (
        "params: unknown keys model.hiden_sizes (did you mean hidden_sizes?), "
        "optimizer.learnig_rate (did you mean learning_rate?), "
        "optimizer.max_steps (it belongs in runconfig.max_steps), runconfig.zzz; "
        "check the spelling or remove them"
    )


def test_the_unknown_keys_listed_are_capped_and_shown_safely() -> None:
    wild = {f"key_{i}\x1b[2J": i for i in range(100)}

    with pytest.raises(InvalidSpec) as raised:
        parse_params({"model": {}, "runconfig": wild})

    message = raised.value.message
    assert "\x1b" not in message and "\n" not in message
    assert message.count("runconfig.key_") == MAX_UNKNOWN_SHOWN
    assert f"and {100 - MAX_UNKNOWN_SHOWN} more" in message


def test_a_gpt2_key_in_fc_mnist_params_is_unknown() -> None:
    with pytest.raises(InvalidSpec, match=r"unknown key model\.num_heads"):
        parse_params({"model": {"name": "fc_mnist", "num_heads": 4}})


_SECTIONS: dict[str, list[type[_Section]]] = {
    "model": [FcMnistModel, Gpt2Model],
    "train_input": [InputSection],
    "eval_input": [InputSection],
    "optimizer": [OptimizerSection],
    "runconfig": [RunConfig],
}


def test_the_keys_the_table_calls_used_are_the_typed_params_fields() -> None:
    for section, models in _SECTIONS.items():
        fields = {f for m in models for f in (*m.model_fields, *m.SPELLINGS)}
        used = {k.key for k in KNOWN_KEYS if k.section == section and k.treatment is USED}
        assert used == fields, section


def test_the_readmes_table_lists_exactly_the_codes_keys() -> None:
    readme = (ROOT / "README.md").read_text()
    table = readme.split("<!-- params-keys -->")[1].split("<!-- /params-keys -->")[0]
    rows = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    listed = [key for first_cell in rows for key in re.findall(r"`([\w.]+)`", first_cell)]

    assert sorted(listed) == sorted(k.path for k in KNOWN_KEYS)


@pytest.mark.parametrize(
    "params",
    [{"optimizer": {"learning_rate": [{"scheduler": "constant", "learning_rate": 0.1}] * 8000}},
     {"model": {"depth": "x" * 100_000}}, {"runconfig": {"seed": list(range(50_000))}},
     {"model": {"name": "x" * 100_000}}],
)  # fmt: skip
def test_a_refused_value_is_shown_bounded(params: dict[str, Any]) -> None:
    # 8,000 schedulers were refused in an 800 KB line echoing every one of them (#32).
    with pytest.raises(InvalidSpec) as refused:
        parse_params({"model": {"name": "fc_mnist"}} | params)
    assert len(refused.value.message) < 400, refused.value.message[:400]
