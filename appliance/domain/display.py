"""Text from other people, made safe to print on a terminal."""

from __future__ import annotations

import re

# Control characters (C0 but newline and tab, DEL, C1): ESC, BEL, CR and the like let a
# string drive the terminal it is printed on (retitle it, recolour it, hide lines).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with every control character shown as a visible \\xNN escape: what any other
    user or a replica wrote can never act on the terminal it is printed to."""
    return _CONTROL.sub(lambda found: f"\\x{ord(found.group()):02x}", text)
