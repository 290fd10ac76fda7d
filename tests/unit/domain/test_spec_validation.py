"""validate_spec and friends: every rule rejects with InvalidSpec naming the offending field."""

from __future__ import annotations

from typing import Any

import pytest

from appliance.domain.errors import InvalidSpec
from appliance.domain.spec import (
    MAX_LABELS,
    MAX_MODEL_DIR,
    MAX_PARAMS_BYTES,
    MAX_STEPS,
    JobSpec,
    Mode,
    Priority,
    parse_label_selector,
    validate_spec,
    validate_user,
)

PARAMS = "model:\n  name: fc_mnist\noptimizer:\n  optimizer_type: sgd\n"
DNS_253 = ".".join(["a" * 63] * 4)[:253]


def spec(**overrides: Any) -> JobSpec:
    fields: dict[str, Any] = {"params_yaml": PARAMS, "num_csx": 1, "num_steps": 10}
    return validate_spec(**{**fields, **overrides})


def test_a_valid_spec_keeps_its_fields_and_defaults() -> None:
    assert spec() == JobSpec(params_yaml=PARAMS, num_csx=1, num_steps=10)
    full = spec(
        num_csx=4,
        num_steps=MAX_STEPS,
        mode="eval",
        labels={"team": "ml", "example.com/run": "r-1.a_b", "empty": ""},
        priority=Priority.P0,
        model_dir="/m" * (MAX_MODEL_DIR // 2),
    )
    assert (full.mode, full.priority, full.num_steps) == (Mode.EVAL, Priority.P0, MAX_STEPS)
    assert full.params == {"model": {"name": "fc_mnist"}, "optimizer": {"optimizer_type": "sgd"}}


@pytest.mark.parametrize(
    "key",
    ["a", "a" * 63, "A.b-c_d9", "example.com/name", f"{DNS_253}/name", "k8s.io/" + "n" * 63],
)
def test_label_keys_of_kubernetes_syntax_are_accepted(key: str) -> None:
    assert dict(spec(labels={key: "v"}).labels) == {key: "v"}


def test_as_many_labels_as_allowed_are_accepted() -> None:
    labels = {f"k{i}": "v" for i in range(MAX_LABELS)}
    assert len(spec(labels=labels).labels) == MAX_LABELS


BAD: list[tuple[str, dict[str, Any], str, str]] = [
    ("zero systems", {"num_csx": 0}, "num_csx", "positive integer"),
    ("negative systems", {"num_csx": -2}, "num_csx", "positive integer"),
    ("fractional systems", {"num_csx": 1.5}, "num_csx", "positive integer"),
    ("zero steps", {"num_steps": 0}, "num_steps", "between 1 and"),
    ("negative steps", {"num_steps": -1}, "num_steps", "between 1 and"),
    ("too many steps", {"num_steps": MAX_STEPS + 1}, "num_steps", "between 1 and"),
    ("unknown mode", {"mode": "predict"}, "mode", "'predict' is not one of train"),
    ("empty params", {"params_yaml": ""}, "params", "params is empty"),
    ("blank params", {"params_yaml": "  \n\t\n"}, "params", "params is empty"),
    ("malformed yaml", {"params_yaml": "model: [fc\n  x: {"}, "params", "not valid YAML"),
    ("bad indentation", {"params_yaml": "model:\n name: a\n  x: b\n"}, "params", "at line 3"),
    ("yaml list", {"params_yaml": "- model\n- optimizer\n"}, "params", "must be a YAML mapping"),
    ("yaml scalar", {"params_yaml": "42\n"}, "params", "must be a YAML mapping"),
    (
        "unknown sections",
        {"params_yaml": PARAMS + "zeta: {}\nalpha: {}\n"},
        "params",
        "unknown section(s) alpha, zeta",
    ),
    ("section not a mapping", {"params_yaml": PARAMS + "runconfig: 3\n"}, "params", "'runconfig'"),
    ("no model section", {"params_yaml": "optimizer: {}\n"}, "params", "non-empty `model`"),
    ("empty model section", {"params_yaml": "model: {}\n"}, "params", "non-empty `model`"),
    (
        "params too large",
        {"params_yaml": PARAMS + "#" * MAX_PARAMS_BYTES},
        "params",
        "larger than",
    ),
    ("key starts with dash", {"labels": {"-team": "ml"}}, "labels", "'-team'"),
    ("key with space", {"labels": {"my team": "ml"}}, "labels", "'my team'"),
    ("key too long", {"labels": {"k" * 64: "v"}}, "labels", "at most 63 characters"),
    ("empty key", {"labels": {"": "v"}}, "labels", "at most 63 characters"),
    ("empty name after prefix", {"labels": {"example.com/": "v"}}, "labels", "example.com/"),
    ("uppercase prefix", {"labels": {"Example.com/x": "v"}}, "labels", "invalid prefix"),
    ("prefix too long", {"labels": {f"{DNS_253}a/x": "v"}}, "labels", "invalid prefix"),
    ("two slashes", {"labels": {"a/b/c": "v"}}, "labels", "invalid prefix"),
    ("value with space", {"labels": {"team": "m l"}}, "labels", "label value 'm l'"),
    ("value ends with dot", {"labels": {"team": "ml."}}, "labels", "label value"),
    ("value too long", {"labels": {"team": "v" * 64}}, "labels", "at most 63 characters"),
    (
        "too many labels",
        {"labels": {f"k{i}": "v" for i in range(MAX_LABELS + 1)}},
        "labels",
        f"at most {MAX_LABELS} labels",
    ),
    ("model_dir too long", {"model_dir": "/" * (MAX_MODEL_DIR + 1)}, "model_dir", "at most"),
    ("model_dir with NUL", {"model_dir": "/models/\x00x"}, "model_dir", "path"),
    ("negative restarts", {"max_restarts": -1}, "max_restarts", "between 0 and 100"),
    ("too many restarts", {"max_restarts": 101}, "max_restarts", "between 0 and 100"),
    ("restarts as text", {"max_restarts": "2"}, "max_restarts", "between 0 and 100"),
    ("restarts as a flag", {"max_restarts": True}, "max_restarts", "between 0 and 100"),
]


@pytest.mark.parametrize(
    ("overrides", "field", "says"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_each_bad_field_is_named(overrides: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(InvalidSpec) as raised:
        spec(**overrides)
    assert raised.value.field == field
    assert says in raised.value.message


def test_priority_parse_accepts_names_and_names_the_field_otherwise() -> None:
    assert Priority.parse(" p1 ") is Priority.P1
    assert Priority.parse("P3") is Priority.P3
    for bad in ("p9", 1, None, ["p1"]):  # the Python client passes what it is given
        with pytest.raises(InvalidSpec) as raised:
            Priority.parse(bad)  # type: ignore[arg-type]
        assert raised.value.field == "priority"
        assert raised.value.message.endswith("is not one of p0, p1, p2, p3")


def test_label_selector_parses_pairs_and_validates_them() -> None:
    assert parse_label_selector(" team=ml , env=prod,") == {"team": "ml", "env": "prod"}
    assert parse_label_selector("") == {}
    for bad in ("team", "te am=ml", "team=m l"):
        with pytest.raises(InvalidSpec) as raised:
            parse_label_selector(bad)
        assert raised.value.field == "labels"


@pytest.mark.parametrize("user", ["", "-", " alice", "a" * 254, "al ice", "bob/x"])
def test_bad_user_names_are_rejected(user: str) -> None:
    with pytest.raises(InvalidSpec) as raised:
        validate_user(user)
    assert raised.value.field == "user"


@pytest.mark.parametrize("user", ["alice", "a.b-c_d@example.com", "_svc", "a" * 253])
def test_good_user_names_are_kept(user: str) -> None:
    assert validate_user(user) == user


def test_params_given_as_a_mapping_are_written_out_as_yaml() -> None:
    mapping = {"model": {"name": "fc_mnist", "hidden_sizes": [4, 2]}, "optimizer": None}
    from_mapping = validate_spec(params_yaml=mapping, num_csx=1, num_steps=10)
    assert from_mapping.params == mapping
    assert from_mapping == validate_spec(
        params_yaml=from_mapping.params_yaml, num_csx=1, num_steps=10
    )
    with pytest.raises(InvalidSpec, match="params is empty") as empty:
        validate_spec(params_yaml={}, num_csx=1, num_steps=10)
    assert empty.value.field == "params"
