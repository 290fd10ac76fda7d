"""What the simulated backend parses: the per-job step time label (checked at submit) and
APPLIANCE_SIM_FAIL_AT; a bad value is one line naming the label or the setting."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from appliance.config import Settings
from appliance.domain.errors import InvalidSpec
from appliance.domain.simulation import MAX_FAIL_AT, FailAt, parse_fail_at
from appliance.domain.spec import SIM_STEP_SECONDS_LABEL, sim_step_seconds, validate_spec

PARAMS = "model: {name: fc_mnist}\n"


@pytest.mark.parametrize(("text", "seconds"), [("0", 0.0), ("0.25", 0.25), ("3600", 3600.0)])
def test_the_step_time_label_is_a_number_of_seconds(text: str, seconds: float) -> None:
    assert sim_step_seconds({SIM_STEP_SECONDS_LABEL: text}) == seconds
    assert sim_step_seconds({"team": "ml"}) is None


@pytest.mark.parametrize("text", ["fast", "-1", "3601", "nan", "inf", "1e9", ""])
def test_a_bad_step_time_label_is_one_line_naming_it(text: str) -> None:
    with pytest.raises(InvalidSpec) as raised:
        sim_step_seconds({SIM_STEP_SECONDS_LABEL: text})
    assert raised.value.field == "labels"
    assert raised.value.message == (
        f"label {SIM_STEP_SECONDS_LABEL} must be a number of seconds from 0 to 3600, got {text!r}"
    )


def test_a_bad_step_time_label_is_refused_at_submit() -> None:
    labels = {SIM_STEP_SECONDS_LABEL: "fast"}
    with pytest.raises(InvalidSpec, match=f"label {SIM_STEP_SECONDS_LABEL} must be a number"):
        validate_spec(params_yaml=PARAMS, num_csx=1, num_steps=1, labels=labels)


def test_fail_at_names_replicas_and_steps() -> None:
    assert parse_fail_at("") == ()
    assert parse_fail_at("cs2-0@150, chief-0@0,memoryx-12@7") == (
        FailAt("cs2-0", 150), FailAt("chief-0", 0), FailAt("memoryx-12", 7),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cs2-0", "'cs2-0' is not REPLICA@STEP"),
        ("cs2@150", "'cs2@150' is not REPLICA@STEP"),
        ("gpu-0@1", "'gpu-0@1' is not REPLICA@STEP with REPLICA one of chief, cs2, memoryx"),
        ("cs2-0@-1", "'cs2-0@-1' is not REPLICA@STEP"),
        ("cs2-0@1,cs2-0@2", "cs2-0 named more than once"),
        (",".join(f"cs2-{i}@1" for i in range(MAX_FAIL_AT + 1)), f"at most {MAX_FAIL_AT}"),
    ],
)
def test_a_bad_fail_at_says_which_entry(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_fail_at(text)
    with pytest.raises(ValidationError) as raised:
        Settings(sim_fail_at=text)
    [error] = raised.value.errors()
    assert error["loc"] == ("sim_fail_at",) and message in error["msg"]
    assert "\n" not in error["msg"]
