"""Params YAML of any shape is refused with a sentence naming `params`, never a crash: deep
nesting (which crashed the coordinator with SIGSEGV), huge scalars, values no Python type
holds, and aliases that expand."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from appliance.domain.bounded_yaml import MAX_DEPTH, MAX_SCALAR_CHARS, load_bounded
from appliance.domain.errors import InvalidSpec
from appliance.domain.spec import validate_params, validate_spec

DEEP_FLOW = "model: " + "[" * 25_000 + "]" * 25_000 + "\n"  # 50 KB


def test_params_nested_25000_deep_are_refused_in_a_process_that_survives() -> None:
    # In its own interpreter: before the bound, libyaml's recursion killed it with SIGSEGV.
    program = (
        "import sys\n"
        "from appliance.domain.errors import InvalidSpec\n"
        "from appliance.domain.spec import validate_params, validate_spec\n"
        "try:\n"
        "    validate_params(sys.stdin.read())\n"
        "except InvalidSpec as exc:\n"
        "    print(exc.field, exc.message)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], input=DEEP_FLOW, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (
        0,
        f"params params nests deeper than {MAX_DEPTH} levels\n",
    ), done.stderr[-500:]


def _block(depth: int) -> str:
    return (
        "model:\n"
        + "".join("  " * i + f"k{i}:\n" for i in range(1, depth + 1))
        + "  " * (depth + 1)
        + "leaf: 1\n"
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("model: " + "[" * 1000 + "]" * 1000, f"nests deeper than {MAX_DEPTH} levels"),
        ("model: " + "{a: " * 65 + "1" + "}" * 65, f"nests deeper than {MAX_DEPTH} levels"),
        (_block(MAX_DEPTH + 1), f"nests deeper than {MAX_DEPTH} levels"),
        ("model: {name: " + "9" * 5000 + "}", f"longer than {MAX_SCALAR_CHARS} characters"),
        ("model: {name: fc_mnist, when: 2001-13-45}", "cannot be read (ValueError)"),
        ("model: {a: &x [1, 2], b: *x}", "*x names a mapping or a list"),
        (
            "a: &a [1, 1]\nb: &b [*a, *a]\nc: &c [*b, *b]\nmodel: {name: fc_mnist}\n",
            "*a names a mapping or a list",
        ),
        ("model: {batch_size: 0x" + "f" * 4094 + "}", "integer of more than 40 digits"),
        ("model: {name: 0x" + "f" * 4000 + "}", "integer of more than 40 digits"),
        ("model: {seed: !!int " + "9" * 41 + "}", "integer of more than 40 digits"),
        ("model: *nowhere", "not valid YAML"),
        ("model: [1, 2\n", "not valid YAML at line 2"),
        # The README's sed, run again for another data set, adds a key above the old one; a
        # loader keeps the last, the old one, silently.
        (
            "train_input:\n  data_dir: ./new\n  data_dir: ./old\nmodel: {name: fc_mnist}\n",
            "train_input.data_dir is given twice (again at line 3); keep one",
        ),
        ("model: {name: fc_mnist, name: gpt2}", "model.name is given twice (again at line 1)"),
    ],
)
def test_params_out_of_bounds_are_refused_naming_the_field(text: str, says: str) -> None:
    with pytest.raises(InvalidSpec, match=re.escape(says)) as no:
        validate_params(text)
    assert no.value.field == "params"


def test_within_bounds_params_load_as_before() -> None:
    assert load_bounded(_block(MAX_DEPTH - 2), "params")["model"]["k1"]["k2"] is not None
    shared = load_bounded("model: {name: &n fc_mnist, alias: *n}", "params")
    assert shared == {"model": {"name": "fc_mnist", "alias": "fc_mnist"}}
    assert load_bounded("model: {v: " + "x" * MAX_SCALAR_CHARS + "}", "params")["model"]["v"]
    assert load_bounded("model: {v: " + "7" * 40 + "}", "params")["model"]["v"] == int("7" * 40)
    assert load_bounded("model: {v: '" + "7" * 400 + "'}", "params")["model"]["v"] == "7" * 400
    same_keys = "a: {x: 1, y: {x: 2}}\nb: [{x: 1}, {x: 2}]\nc: {<<: {x: 1}}\n"  # not twice
    assert load_bounded(same_keys, "params")["b"] == [{"x": 1}, {"x": 2}]


def _nested(depth: int) -> dict[str, object]:
    inner: dict[str, object] = {"leaf": 1}
    for _ in range(depth):
        inner = {"a": inner}
    return inner


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"model": {"name": "fc_mnist"}, "train_input": _nested(900)}, "nests deeper than 64"),
        ({"model": {"name": "fc_mnist", "n": 10**200}}, "integer of more than 40 digits"),
        ({"model": {"name": "x" * 5000}}, "longer than 4096 characters"),
        ({"model": {"name": "\udcff"}}, "not valid Unicode text"),
    ],
)
def test_a_json_object_out_of_bounds_is_refused_before_it_is_written_out(
    params: dict[str, object], says: str
) -> None:
    """A JSON door hands the mapping itself; writing it out as YAML recursed (900 deep gave a
    RecursionError, a 500)."""
    with pytest.raises(InvalidSpec, match=re.escape(says)) as no:
        validate_spec(params_yaml=params, num_csx=1, num_steps=1)
    assert no.value.field == "params"
