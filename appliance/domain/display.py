"""Text from other people, made safe to show on a terminal, and refused where it enters.

Control characters (C0 but newline and tab, DEL, C1) let a string drive the terminal it is
printed on: retitle it, recolour it, hide lines. Format characters (right-to-left overrides,
zero-width spaces and joiners), line and paragraph separators and lone surrogates do not act
on the terminal but change what a reader sees: "ok \\u202eDEDEECCUS" reads as "ok SUCCEEDED".
"""

from __future__ import annotations

import re
import unicodedata

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Where one line of text enters, a newline and a tab are refused too.
_CONTROL_IN_LINE = re.compile(r"[\x00-\x1f\x7f]")
# Unicode categories of characters that are not what they look like (or not there at all).
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def printable(text: str) -> str:
    """`text` with every control and invisible character shown as a visible \\xNN or \\uNNNN
    escape (newlines and tabs kept): what any other user or a replica wrote can never act on,
    or disguise itself on, the terminal it is printed to."""
    if text.isascii():
        return _CONTROL.sub(_escape, text)
    return "".join(
        _escape_char(c) if c not in "\n\t" and unicodedata.category(c) in _HIDDEN else c
        for c in text
    )


def hidden_character(text: str) -> str | None:
    """The first character of `text` that is a control or invisible one, as an escape; None
    when there is none. (Where one line of text enters: reasons, lease holders, paths.)"""
    if text.isascii():
        found = _CONTROL_IN_LINE.search(text)
        return _escape_char(found.group()) if found else None
    for c in text:
        if unicodedata.category(c) in _HIDDEN:
            return _escape_char(c)
    return None


def _escape(found: re.Match[str]) -> str:
    return _escape_char(found.group())


def _escape_char(c: str) -> str:
    code = ord(c)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"
