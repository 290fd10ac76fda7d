"""What a page's query or a form gives, checked: refused with InvalidSpec naming the field."""

from __future__ import annotations

from collections.abc import Iterable

from appliance.domain.errors import InvalidSpec
from appliance.domain.spec import parse_label_selector, validate_labels


def labels(text: str, field: str) -> dict[str, str]:
    """`k=v,k2=v2`, as csctl -l takes it."""
    try:
        return validate_labels(parse_label_selector(text))
    except InvalidSpec as exc:
        raise InvalidSpec(exc.message, field=field) from None


def one_of(text: str, allowed: Iterable[str], field: str) -> str:
    names = list(allowed)
    if text not in names:
        raise InvalidSpec(f"{field} must be one of {', '.join(names)}", field=field)
    return text
