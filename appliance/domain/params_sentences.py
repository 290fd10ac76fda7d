"""The one sentence a refused params file gets: "params: <key path> <what is wrong>, got <value>",
from pydantic's first error, the value shown bounded. Pure: no I/O."""

from __future__ import annotations

from typing import Any

import pydantic

# The most of a refused value an error sentence shows.
MAX_SHOWN = 80


def shown(value: Any) -> str:
    """`value` as the error shows it: its repr, cut (a list of 8,000 schedulers was echoed)."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def sentence_of(err: pydantic.ValidationError, prefix: str) -> str:
    """The first error as "params: <key path> <what is wrong>, got <value>"."""
    first = err.errors(include_url=False)[0]
    parts = [prefix] if prefix else []
    parts += [str(p) for p in first["loc"] if not str(p).startswith(("function-", "tagged-"))]
    path = ".".join(parts)
    kind, context, value = first["type"], first.get("ctx") or {}, first.get("input")
    if kind == "extra_forbidden":
        return f"params: unknown key {path}; check the spelling or remove it"
    if kind == "value_error":
        return f"params: {context.get('error', first['msg'])}"
    bounds = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<"}
    if kind in bounds:
        limit = next(iter(context.values()))
        return f"params: {path} must be {bounds[kind]} {_number(limit)}, got {shown(value)}"
    if kind == "less_than_equal":
        return f"params: {path} must be <= {context.get('le')}, got {shown(value)}"
    if kind == "literal_error":
        return f"params: {path} {shown(value)} is not one of {context.get('expected')}"
    if kind == "size_range":
        return f"params: {path} {first['msg']}, got {shown(value)}"
    if kind == "processor":
        return f"params: {path} {shown(value)} {first['msg']}"
    if kind == "int_parsing":
        if path[-1:].isdigit():  # an item of a list: name the list
            return f"params: {path.rsplit('.', 1)[0]} must be integers, got {shown(value)}"
        return f"params: {path} must be an integer, got {shown(value)}"
    return f"params: {path}: {first['msg'].lower()}, got {shown(value)}"


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
