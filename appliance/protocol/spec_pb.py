"""JobSpec to and from its protobuf message, derived from the spec's fields: each JobSpec field is
the message field of the same name (a field missing from the proto fails at import).

`spec_from_pb` is the one decoder, for what a client sends (then validated by validate_spec) and
what the server sends back alike: enum zero means the field's default and an unknown number is
an InvalidSpec naming the field; an `optional` field left unset takes the default, and so does
a plain scalar left at its zero value (so a field whose default is not its zero value, such as
`preemptible`, must be `optional` in the proto).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from appliance._proto.v1 import cluster_pb2, common_pb2
from appliance.domain.errors import InvalidSpec
from appliance.domain.spec import JobSpec, Mode, Priority
from appliance.domain.spec_document import SpecField, field_default, spec_fields

MODE_TO_PB = {m: common_pb2.Mode.Value(f"MODE_{m.name}") for m in Mode}
PRIORITY_TO_PB = {p: common_pb2.Priority.Value(f"PRIORITY_{p.name}") for p in Priority}
# The spec's enums: their numbers on the wire (0: unspecified, the field's default), and what
# an unknown number is said to be.
_ENUMS: Mapping[type[enum.Enum], tuple[Mapping[Any, int], str]] = {
    Mode: (MODE_TO_PB, "is not a known mode"),
    Priority: (PRIORITY_TO_PB, "is not one of P0-P3"),
}


class _Wire(NamedTuple):
    name: str
    encode: Callable[[Any], Any]  # the value for the message's constructor; None: leave unset
    decode: Callable[[cluster_pb2.JobSpec], Any]  # the value, or MISSING for the default


def _wire(f: SpecField) -> _Wire:
    field = cluster_pb2.JobSpec.DESCRIPTOR.fields_by_name[f.name]
    name, default = f.name, field_default(f)
    known = _ENUMS.get(f.hint) if isinstance(f.hint, type) else None
    if known is not None:
        to_pb, unknown = known
        from_pb = {int(number): member for member, number in to_pb.items()}

        def decode_enum(msg: cluster_pb2.JobSpec) -> Any:
            number = getattr(msg, name)
            if not number:
                return default
            if number not in from_pb:
                raise InvalidSpec(f"{name} {number} {unknown}", field=name)
            return from_pb[number]

        return _Wire(name, to_pb.__getitem__, decode_enum)
    if field.is_repeated and field.message_type is None:  # a list: its document form

        def decode_list(msg: cluster_pb2.JobSpec) -> Any:
            return f.codec.decode(list(getattr(msg, name)))

        return _Wire(name, lambda v: f.codec.encode(v) or None, decode_list)
    if field.is_repeated:  # a map
        return _Wire(name, dict, lambda msg: dict(getattr(msg, name)))
    if field.has_presence:

        def decode_optional(msg: cluster_pb2.JobSpec) -> Any:
            return getattr(msg, name) if msg.HasField(name) else default  # type: ignore[arg-type]

        return _Wire(name, _identity, decode_optional)

    def decode_scalar(msg: cluster_pb2.JobSpec) -> Any:
        value = getattr(msg, name)
        return default if not value and default is not dataclasses.MISSING else value

    return _Wire(name, _identity, decode_scalar)


def _identity(value: Any) -> Any:
    return value


_WIRES = tuple(_wire(f) for f in spec_fields())


def spec_to_pb(spec: JobSpec) -> cluster_pb2.JobSpec:
    """The spec's message (an empty list or a None left unset: a listing builds 100,000)."""
    values = {}
    for name, encode, _ in _WIRES:
        value = getattr(spec, name)
        if value is not None:
            value = encode(value)
            if value is not None:
                values[name] = value
    return cluster_pb2.JobSpec(**values)


def spec_from_pb(msg: cluster_pb2.JobSpec) -> JobSpec:
    """The spec a message holds, for input and output alike: validate_spec(**spec_values(...))
    checks what a client sent. InvalidSpec naming a field whose value cannot be decoded."""
    values = {}
    for name, _, decode in _WIRES:
        value = decode(msg)
        if value is not dataclasses.MISSING:
            values[name] = value
    return JobSpec(**values)
