"""Reading YAML a user sent, with its shape bounded before anything is built from it.

libyaml and PyYAML build nested nodes recursively: a 51 KB params file nested 25,000 deep
crashes the process (SIGSEGV), 1,000 deep raises RecursionError, and a 5,000-digit integer
raises ValueError. So the text is first walked as a stream of parser events, which libyaml
produces without recursion and which stops at the first event over a bound: nesting depth,
scalar length, and aliases (an alias of a mapping or list can expand exponentially when the
result is walked; an alias of a plain value cannot). Only then is it loaded, and any failure
of the load is the caller's mistake, named as its field, never an internal error.
"""

from __future__ import annotations

from typing import Any

import yaml

from appliance.domain.errors import InvalidSpec

MAX_DEPTH = 64
MAX_SCALAR_CHARS = 4096

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when available: ~10x faster
_OPENS = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSES = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


def load_bounded(text: str, field: str) -> Any:
    """The YAML document in `text`; InvalidSpec naming `field` for anything unreadable or out
    of bounds (the caller bounds the text's size)."""
    try:
        _check_shape(text, field)
        return yaml.load(text, Loader=_LOADER)
    except InvalidSpec:
        raise
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise InvalidSpec(f"{field} is not valid YAML{at}", field=field) from None
    except Exception as exc:  # a value no Python type holds (a 5,000-digit integer, ...)
        raise InvalidSpec(
            f"{field} has a value that cannot be read ({type(exc).__name__})", field=field
        ) from None


def _check_shape(text: str, field: str) -> None:
    depth = 0
    anchors: dict[str, bool] = {}  # anchor -> names a plain value
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, _OPENS):
            depth += 1
            if event.anchor is not None:
                anchors[event.anchor] = False
            if depth > MAX_DEPTH:
                raise InvalidSpec(f"{field} nests deeper than {MAX_DEPTH} levels", field=field)
        elif isinstance(event, _CLOSES):
            depth -= 1
        elif isinstance(event, yaml.ScalarEvent):
            if len(event.value) > MAX_SCALAR_CHARS:
                raise InvalidSpec(
                    f"{field} has a value longer than {MAX_SCALAR_CHARS} characters", field=field
                )
            if event.anchor is not None:
                anchors[event.anchor] = True
        elif isinstance(event, yaml.AliasEvent) and anchors.get(event.anchor or "") is False:
            raise InvalidSpec(
                f"{field} may repeat only plain values with aliases (*{event.anchor} names a "
                "mapping or a list); write it out",
                field=field,
            )
