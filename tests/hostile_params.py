"""Params YAML of hostile shapes, for the gRPC and REST fuzzers: nested deep (flow and block),
wide, with huge scalars, with aliases of collections, and arbitrary nested data."""

from __future__ import annotations

import yaml
from hypothesis import strategies as st

_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=20)
)


def _flow(depth: int, opener: str) -> str:
    closer = {"[": "]", "{a: ": "}"}[opener]
    return "model: " + opener * depth + "1" + closer * depth + "\n"


def _block(depth: int) -> str:
    return (
        "model:\n"
        + "".join("  " * i + f"k{i}:\n" for i in range(1, depth + 1))
        + ("  " * (depth + 1) + "leaf: 1\n")
    )


def _aliases(levels: int) -> str:
    lines = ["a0: &a0 [1, 1]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]" for i in range(1, levels)]
    return "\n".join(lines) + f"\nmodel: {{x: *a{levels - 1}}}\n"


HOSTILE_PARAMS = st.one_of(
    st.builds(_flow, st.integers(1, 30_000), st.sampled_from(["[", "{a: "])),
    st.builds(_block, st.integers(1, 200)),
    st.builds(
        lambda n: "model: {" + ", ".join(f"k{i}: {i}" for i in range(n)) + "}\n",
        st.integers(1, 60_000),
    ),
    st.builds(
        lambda n, c: "model: {name: " + c * n + "}\n",
        st.integers(1, 20_000),
        st.sampled_from(["9", "x", "'"]),
    ),
    st.builds(_aliases, st.integers(1, 40)),
    # Integers too large to write out in decimal (an error message once tried, and failed).
    st.builds(
        lambda n, form: "model: {name: fc_mnist, batch_size: " + form + "f" * n + "}\n",
        st.integers(1, 4094),
        st.sampled_from(["0x", "!!int 0x"]),
    ),
    st.builds(
        lambda value: yaml.safe_dump({"model": value}),
        st.recursive(
            _SCALARS,
            lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
            max_leaves=50,
        ),
    ),
)
