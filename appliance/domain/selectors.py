"""Label selectors as kubectl writes them: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a)`,
`k` (has the label) and `!k` (has it not), joined by commas, every one of them to match.

As in Kubernetes, `k!=v` and `k notin (...)` also match jobs without the label `k`. The text is
bounded (MAX_SELECTOR_CHARS, MAX_REQUIREMENTS, MAX_VALUES) and every key and value must be a
valid label key and value; a selector that is not one is refused with a one-line error naming
the field it came in and what was found where.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Iterable, Mapping
from typing import NoReturn

from appliance.domain.errors import InvalidSpec
from appliance.domain.spec import MAX_LABELS, validate_labels

MAX_SELECTOR_CHARS = 4096
MAX_REQUIREMENTS = MAX_LABELS
MAX_VALUES = 64  # in one `in (...)` or `notin (...)`


class Op(enum.Enum):
    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    NOT_EXISTS = "!"

    @property
    def negated(self) -> bool:
        """Matches the jobs the positive form does not (`!=`, `notin`, `!k`)."""
        return self in (Op.NOT_EQUALS, Op.NOT_IN, Op.NOT_EXISTS)


@dataclasses.dataclass(frozen=True)
class Requirement:
    """One term of a selector. `values`: what the label's value must (not) be; empty for
    EXISTS and NOT_EXISTS."""

    key: str
    op: Op
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        found = labels.get(self.key)
        positive = found is not None and (not self.values or found in self.values)
        return positive != self.op.negated

    def __str__(self) -> str:
        if self.op is Op.EXISTS:
            return self.key
        if self.op is Op.NOT_EXISTS:
            return f"!{self.key}"
        if self.op in (Op.IN, Op.NOT_IN):
            return f"{self.key} {self.op.value} ({','.join(self.values)})"
        return f"{self.key}{self.op.value}{self.values[0]}"


@dataclasses.dataclass(frozen=True)
class LabelSelector:
    """Requirements that must all match (none: every job matches)."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def __bool__(self) -> bool:
        return bool(self.requirements)

    @property
    def narrows(self) -> bool:
        """Whether it names jobs by a label they have (k=v, k in (...), k): a selector of only
        negations (k!=v, k notin (...), !k) matches every job without the key, so it does not
        say whose jobs are meant."""
        return any(not r.op.negated for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)

    @classmethod
    def equal_to(cls, labels: Mapping[str, str]) -> LabelSelector:
        """The selector of `k=v` for every item of `labels`."""
        return cls(tuple(Requirement(k, Op.EQUALS, (v,)) for k, v in sorted(labels.items())))

    def and_(self, other: LabelSelector, field: str = "label_selector") -> LabelSelector:
        """Both selectors at once (bounded like one)."""
        return _bounded(self.requirements + other.requirements, field)


# Words (keys, values, `in`, `notin`), operators, parentheses, commas; anything else is refused.
_TOKEN = re.compile(r"\s*(?:(?P<word>[A-Za-z0-9._/-]+)|(?P<op>==|!=|=|!|\(|\)|,))")


def parse_selector(text: str, field: str = "label_selector") -> LabelSelector:
    """A kubectl label selector; InvalidSpec naming `field` when it is not one."""
    if len(text) > MAX_SELECTOR_CHARS:
        raise InvalidSpec(
            f"{field} must be at most {MAX_SELECTOR_CHARS} characters, got {len(text)}",
            field=field,
        )
    return _bounded(_Parser(text, field).requirements(), field)


def parse_selectors(texts: Iterable[str], field: str = "label_selector") -> LabelSelector:
    """Several selectors (a repeated option or query parameter), all of which must match."""
    selector = LabelSelector()
    for text in texts:
        selector = selector.and_(parse_selector(text, field), field)
    return selector


def _bounded(requirements: tuple[Requirement, ...], field: str) -> LabelSelector:
    if len(requirements) > MAX_REQUIREMENTS:
        raise InvalidSpec(
            f"{field} must have at most {MAX_REQUIREMENTS} requirements",
            field=field,
        )
    return LabelSelector(requirements)


class _Parser:
    def __init__(self, text: str, field: str) -> None:
        self.text = text
        self.field = field
        self.tokens: list[tuple[str, str, int]] = []  # (kind, text, position)
        position = 0
        while position < len(text):
            if text[position:].isspace():
                break
            found = _TOKEN.match(text, position)
            if found is None:
                at = position + len(text[position:]) - len(text[position:].lstrip())
                self._fail(f"unexpected character {text[at]!r}", at, found=False)
            kind = "word" if found.group("word") is not None else "op"
            token = found.group(kind)
            self.tokens.append((kind, token, found.end() - len(token)))
            position = found.end()
        self.at = 0

    def requirements(self) -> tuple[Requirement, ...]:
        found: list[Requirement] = []
        while self.at < len(self.tokens):
            found.append(self._requirement())
            if len(found) > MAX_REQUIREMENTS:
                break  # _bounded says so
            if self.at < len(self.tokens):
                self._expect(",", "',' between requirements")
        if self.tokens and self.tokens[-1][1] == ",":
            self._fail("expected a requirement after the last ','", len(self.text))
        return tuple(found)

    def _requirement(self) -> Requirement:
        if self._peek() == ("op", "!"):
            self.at += 1
            return self._checked(Requirement(self._key(), Op.NOT_EXISTS))
        key = self._key()
        kind, token = self._peek()
        if kind == "" or token == ",":
            return self._checked(Requirement(key, Op.EXISTS))
        if token in ("=", "==", "!="):
            self.at += 1
            value = ""
            if self._peek()[0] == "word":
                value = self.tokens[self.at][1]
                self.at += 1
            op = Op.NOT_EQUALS if token == "!=" else Op.EQUALS
            return self._checked(Requirement(key, op, (value,)))
        if (kind, token) in (("word", "in"), ("word", "notin")):
            self.at += 1
            return self._checked(Requirement(key, Op(token), self._values(key)))
        self._fail(f"after key {key!r} expected =, ==, !=, in, notin, ',' or the end")

    def _values(self, key: str) -> tuple[str, ...]:
        self._expect("(", "'(' opening the values")
        values: list[str] = []
        while True:
            kind, token = self._peek()
            if kind != "word":
                if not values and token == ")":
                    self._fail(f"the values of {key!r} must not be empty", found=False)
                self._fail(f"expected a value of {key!r}")  # `(a,,b)`, `(,a)`, `(a,)`
            values.append(token)
            self.at += 1
            if self._peek() == ("op", ")"):
                self.at += 1
                break
            self._expect(",", "',' or ')' in the values")
        if len(values) > MAX_VALUES:
            self._fail(f"the values of {key!r} must be at most {MAX_VALUES}", found=False)
        return tuple(dict.fromkeys(values))

    def _key(self) -> str:
        kind, token = self._peek()
        if kind != "word":
            self._fail("expected a label key")
        self.at += 1
        return token

    def _peek(self) -> tuple[str, str]:
        if self.at >= len(self.tokens):
            return "", ""
        kind, token, _ = self.tokens[self.at]
        return kind, token

    def _expect(self, token: str, what: str) -> None:
        if self._peek() != ("op", token):
            self._fail(f"expected {what}")
        self.at += 1

    def _checked(self, requirement: Requirement) -> Requirement:
        try:
            for value in requirement.values or ("",):
                validate_labels({requirement.key: value})
        except InvalidSpec as exc:
            raise InvalidSpec(f"{self.field}: {exc.message}", field=self.field) from None
        return requirement

    def _fail(self, what: str, position: int | None = None, found: bool = True) -> NoReturn:
        if position is None:
            position = self.tokens[self.at][2] if self.at < len(self.tokens) else len(self.text)
        if found:
            token = repr(self.tokens[self.at][1]) if self.at < len(self.tokens) else "the end"
            what = f"{what}, found {token}"
        text = self.text if len(self.text) <= 60 else self.text[:60] + "..."
        raise InvalidSpec(
            f"{self.field} {text!r}: {what} at character "
            f"{position + 1} (write k=v, k!=v, 'k in (a,b)', 'k notin (a,b)', k or !k, "
            "joined by commas)",
            field=self.field,
        )
