"""A job spec as a plain document (what JSON and YAML hold) and back, derived from JobSpec's
fields (domain/spec_fields.py): the one spelling of a spec in csctl's and REST's documents and in
the store's `spec` column.

Values as a person reads them: a mode as "train", a priority as "P2", labels as a mapping,
dependencies as "afterok:wsjob-…". Decoding is forward-compatible: keys a newer writer added are
ignored, keys an older writer did not know take their defaults. Decoding does not validate
(validate_spec does); a value of the wrong kind is an InvalidSpec naming its field.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from appliance.domain.dependencies import parse_dependencies
from appliance.domain.errors import InvalidSpec
from appliance.domain.spec import JobSpec, Priority
from appliance.domain.spec_fields import FieldInfo, Storage, default_of, fields_of

# The version of the store's document (its "v" key): a reader handles every older one, and a
# newer one as far as it knows its keys.
STORED_VERSION = 1
_VERSION_KEY = "v"


class Codec(NamedTuple):
    """How one field's value becomes a plain value and back."""

    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]


class SpecField(NamedTuple):
    """A JobSpec field as the generic code sees it: its name, its type, its default (MISSING:
    none), its FieldInfo and its codec."""

    name: str
    hint: Any
    default: Any
    info: FieldInfo
    codec: Codec


def _identity(value: Any) -> Any:
    return value


def _priority(value: Any) -> Priority:
    return value if isinstance(value, Priority) else Priority.parse(value)


def _enum_codec(cls: type[enum.Enum], name: str) -> Codec:
    by_value = {member.value: member for member in cls}

    def decode(value: Any) -> Any:
        try:
            return by_value[value]
        except (KeyError, TypeError):
            choices = ", ".join(str(v) for v in by_value)
            raise InvalidSpec(f"{name} {value!r} is not one of {choices}", field=name) from None

    return Codec(lambda member: member.value, decode)


def codec_for(hint: Any, name: str) -> Codec:
    """The codec of the field `name` of type `hint`."""
    if hint is Priority:  # by name, as every door shows it: P2
        return Codec(lambda p: p.name, _priority)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum_codec(hint, name)
    origin = typing.get_origin(hint)
    if origin is Mapping or origin is dict:
        return Codec(dict, dict)
    if origin is tuple:  # dependencies, as "condition:job"
        return Codec(lambda items: [str(i) for i in items], parse_dependencies)
    return Codec(_identity, _identity)


@functools.cache
def spec_fields() -> tuple[SpecField, ...]:
    """JobSpec's fields, in declaration order (the order of every document)."""
    hints = typing.get_type_hints(JobSpec)
    return tuple(
        SpecField(f.name, hints[f.name], f, info, codec_for(hints[f.name], f.name))
        for f, info in fields_of(JobSpec)
    )


def field_default(field: SpecField) -> Any:
    """The field's default (a fresh one for a factory); MISSING when it has none."""
    return default_of(field.default)


def spec_document(spec: JobSpec, names: Iterable[str] | None = None) -> dict[str, Any]:
    """The spec as plain values, every field in order (or those of `names`)."""
    wanted = None if names is None else frozenset(names)
    return {
        f.name: f.codec.encode(getattr(spec, f.name))
        for f in spec_fields()
        if wanted is None or f.name in wanted
    }


def spec_from_document(document: Mapping[str, Any], **given: Any) -> JobSpec:
    """The spec a document holds, with `given` values (already decoded) for the fields it does
    not: unknown keys are ignored, missing keys take their defaults; InvalidSpec naming a field
    without a default that is missing, or whose value cannot be decoded."""
    values = dict(given)
    for f in spec_fields():
        if f.name in values:
            continue
        if f.name in document:
            values[f.name] = f.codec.decode(document[f.name])
        elif field_default(f) is dataclasses.MISSING:
            raise InvalidSpec(f"{f.name} is missing", field=f.name)
    return JobSpec(**values)


def spec_values(spec: JobSpec) -> dict[str, Any]:
    """The spec's fields by name, as validate_spec takes them (to validate a decoded spec)."""
    return {f.name: getattr(spec, f.name) for f in spec_fields()}


# ---- the store's document: the fields kept in the `spec` column -------------------------------

STORED = tuple(f for f in spec_fields() if f.info.storage is Storage.DOCUMENT)
COLUMNS = tuple(f.name for f in spec_fields() if f.info.storage is Storage.COLUMN)


def stored_document(spec: JobSpec) -> dict[str, Any]:
    """What the store's `spec` column holds of a spec (its version first)."""
    return {_VERSION_KEY: STORED_VERSION, **spec_document(spec, (f.name for f in STORED))}


_STORED_NAMES = tuple(f.name for f in STORED)
# Decoded by their codec (the others are stored as they are): a listing decodes 100,000 of these.
_STORED_DECODED = tuple(
    (f.name, f.codec.decode) for f in STORED if f.codec.decode is not _identity
)
_STORED_DEFAULTS = {
    f.name: field_default(f) for f in STORED if field_default(f) is not dataclasses.MISSING
}


def stored_values(document: Mapping[str, Any]) -> dict[str, Any]:
    """The decoded values of the store's `spec` column, by field name (the columns' fields and
    the ones kept elsewhere are the store's to add): forward-compatible as spec_from_document."""
    values = {name: document[name] for name in _STORED_NAMES if name in document}
    for name, decode in _STORED_DECODED:
        if name in values:
            values[name] = decode(values[name])
    if len(values) < len(_STORED_NAMES):  # an older writer's document
        values = {**_STORED_DEFAULTS, **values}
    return values
