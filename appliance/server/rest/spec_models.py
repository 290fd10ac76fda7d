"""The REST models' spec fields derived from JobSpec's (domain/spec_fields.py): a spec field
that models.py (SpecOut) or requests.py (JobSubmitIn) does not declare by hand is added to the
model with a type, default and description taken from the field, so a new spec field reaches
REST, in and out, with no edit here."""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Collection
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, Field, create_model

from appliance.domain.spec import Priority
from appliance.domain.spec_document import SpecField, field_default, spec_fields

M = TypeVar("M", bound=BaseModel)
StrictInt = Annotated[int, Field(strict=True)]
StrictBool = Annotated[bool, Field(strict=True)]


class PriorityName(enum.StrEnum):
    """P0 runs first (admin-only), P2 is the default, P3 runs last."""

    P0 = "P0"
    P1 = "P1"
    P2 = "P2"
    P3 = "P3"


def _rest_type(hint: Any, strict: bool) -> Any:
    """The pydantic annotation of a spec field of type `hint` (strict in requests: no "1" for
    1, as the declared fields)."""
    if hint is Priority:
        return PriorityName
    if hint is int:
        return StrictInt if strict else int
    if hint is bool:
        return StrictBool if strict else bool
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return typing.Union[tuple(_rest_type(a, strict) for a in typing.get_args(hint))]  # noqa: UP007
    if origin is tuple:
        return list[str]
    if origin is not None and issubclass(origin, Collection):
        return dict[str, str]
    return hint


def _field(f: SpecField, strict: bool) -> tuple[Any, Any]:
    default = field_default(f)
    bounds: dict[str, Any] = {}
    if f.info.max_chars is not None:
        bounds["max_length"] = f.info.max_chars
    if default is dataclasses.MISSING:
        return _rest_type(f.hint, strict), Field(description=f.info.doc, **bounds)
    if isinstance(default, Priority):
        default = PriorityName[default.name]
    elif isinstance(default, tuple):
        default = list(default)
    return _rest_type(f.hint, strict), Field(default=default, description=f.info.doc, **bounds)


def with_spec_fields(
    model: type[M], name: str, *, strict: bool, skip: Collection[str] = ()
) -> type[M]:
    """The model `name`: `model` with a field for each spec field it does not declare (nor
    names in `skip`)."""
    extra = {
        f.name: _field(f, strict)
        for f in spec_fields()
        if f.name not in model.model_fields and f.name not in skip
    }
    return create_model(  # type: ignore[call-overload,no-any-return]
        name, __base__=model, __module__=model.__module__, __doc__=model.__doc__, **extra
    )
