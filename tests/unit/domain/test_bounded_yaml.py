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
from appliance.domain.spec import validate_params

DEEP_FLOW = "model: " + "[" * 25_000 + "]" * 25_000 + "\n"  # 50 KB


def test_params_nested_25000_deep_are_refused_in_a_process_that_survives() -> None:
    # In its own interpreter: before the bound, libyaml's recursion killed it with SIGSEGV.
    program = (
        "import sys\n"
        "from appliance.domain.errors import InvalidSpec\n"
        "from appliance.domain.spec import validate_params\n"
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
        ("model: *nowhere", "not valid YAML"),
        ("model: [1, 2\n", "not valid YAML at line 2"),
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
    assert load_bounded("model: {v: " + "7" * MAX_SCALAR_CHARS + "}", "params")["model"]["v"]
