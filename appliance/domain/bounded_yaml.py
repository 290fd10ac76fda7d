"""Reading YAML a user sent, with its shape bounded before anything is built from it.

libyaml and PyYAML build nested nodes recursively: a 51 KB params file nested 25,000 deep
crashes the process (SIGSEGV), 1,000 deep raises RecursionError, and a 5,000-digit integer
raises ValueError. So the text is first walked as a stream of parser events, which libyaml
produces without recursion and which stops at the first event over a bound: nesting depth,
scalar length, and aliases (an alias of a mapping or list can expand exponentially when the
result is walked; an alias of a plain value cannot). Only then is it loaded, and any failure
of the load is the caller's mistake, named as its field, never an internal error.

libyaml from 0.2.6 (bundled in PyYAML 6.0.4's wheels) has a nesting limit of its own (1,000),
and its scanner, reading ahead, can reach it before the parser has sent the event at our
depth 65: that error is the same refusal, said the same way.
"""

from __future__ import annotations

from typing import Any

import yaml

from appliance.domain.errors import InvalidSpec

MAX_DEPTH = 64
MAX_SCALAR_CHARS = 4096
# No params value needs more (a seed is < 2**63); a 4,000-digit hex integer cannot even be
# shown in an error message (Python refuses to write out an int of over 4,300 digits).
MAX_INTEGER_CHARS = 40
_INT_TAG = "tag:yaml.org,2002:int"
_RESOLVER = yaml.resolver.Resolver()

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
    try:
        _walk_events(text, field)
    except yaml.MarkedYAMLError as exc:
        if "maximum nesting depth" in (exc.problem or ""):
            raise _too_deep(field) from None
        raise


def _too_deep(field: str) -> InvalidSpec:
    return InvalidSpec(f"{field} nests deeper than {MAX_DEPTH} levels", field=field)


class _Mapping:
    """An open mapping of the event stream: its keys so far, whether a key comes next."""

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.key = ""
        self.wants_key = True


def _check_key(frames: list[_Mapping | None], event: yaml.Event, field: str) -> None:
    """A node starts: in a mapping, a key or a value in turn; a key given twice is refused
    (YAML loaders keep the last silently, so an edit adding a key above the old one was lost)."""
    frame = frames[-1] if frames else None
    if frame is None:
        return
    frame.wants_key = not frame.wants_key
    if frame.wants_key or not isinstance(event, yaml.ScalarEvent) or event.value == "<<":
        return
    frame.key = event.value
    if frame.key in frame.keys:
        where = ".".join([f.key for f in frames if f is not None])
        line = event.start_mark.line + 1 if event.start_mark is not None else 0
        raise InvalidSpec(
            f"{field}: {where} is given twice (again at line {line}); keep one", field=field
        )
    frame.keys.add(frame.key)


def _walk_events(text: str, field: str) -> None:
    depth = 0
    anchors: dict[str, bool] = {}  # anchor -> names a plain value
    frames: list[_Mapping | None] = []  # the open collections (None: a sequence)
    for event in yaml.parse(text, Loader=_LOADER):
        if isinstance(event, (*_OPENS, yaml.ScalarEvent, yaml.AliasEvent)):
            _check_key(frames, event, field)
        if isinstance(event, _OPENS):
            frames.append(_Mapping() if isinstance(event, yaml.MappingStartEvent) else None)
            depth += 1
            if event.anchor is not None:
                anchors[event.anchor] = False
            if depth > MAX_DEPTH:
                raise _too_deep(field)
        elif isinstance(event, _CLOSES):
            frames.pop()
            depth -= 1
        elif isinstance(event, yaml.ScalarEvent):
            if len(event.value) > MAX_SCALAR_CHARS:
                raise InvalidSpec(
                    f"{field} has a value longer than {MAX_SCALAR_CHARS} characters", field=field
                )
            _check_unicode(event.value, field)
            if len(event.value) > MAX_INTEGER_CHARS and _is_integer(event):
                raise InvalidSpec(
                    f"{field} has an integer of more than {MAX_INTEGER_CHARS} digits", field=field
                )
            if event.anchor is not None:
                anchors[event.anchor] = True
        elif isinstance(event, yaml.AliasEvent) and anchors.get(event.anchor or "") is False:
            raise InvalidSpec(
                f"{field} may repeat only plain values with aliases (*{event.anchor} names a "
                "mapping or a list); write it out",
                field=field,
            )


def _is_integer(event: yaml.ScalarEvent) -> bool:
    if event.tag is not None and event.tag != "!":
        return bool(event.tag == _INT_TAG)
    plain = bool(event.implicit[0])
    tag = _RESOLVER.resolve(yaml.ScalarNode, event.value, (True, False))  # type: ignore[no-untyped-call]
    return plain and tag == _INT_TAG


def check_nesting(value: Any, field: str) -> None:
    """A value built from JSON, bounded like YAML text before anything recurses into it:
    nesting depth, string length, integer size. Walked without recursion."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                raise _too_deep(field)
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(item, str):
            if len(item) > MAX_SCALAR_CHARS:
                raise InvalidSpec(
                    f"{field} has a value longer than {MAX_SCALAR_CHARS} characters", field=field
                )
            _check_unicode(item, field)
        elif isinstance(item, int) and item.bit_length() > 4 * MAX_INTEGER_CHARS:
            raise InvalidSpec(
                f"{field} has an integer of more than {MAX_INTEGER_CHARS} digits", field=field
            )


def _check_unicode(text: str, field: str) -> None:
    """A lone surrogate (a JSON or YAML \\udcff escape) is no text: no file name, no label."""
    try:
        text.encode()
    except UnicodeEncodeError:
        raise InvalidSpec(f"{field} is not valid Unicode text", field=field) from None
