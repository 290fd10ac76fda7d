"""Job identifiers: `wsjob-` followed by 14 lowercase base-36 characters; an array's task
adds `_<index>` (`wsjob-…_7`, domain/arrays.py)."""

from __future__ import annotations

import re
import secrets
import string

_ALPHABET = string.digits + string.ascii_lowercase
JOB_ID_RE = re.compile(r"^wsjob-[0-9a-z]{12,40}(_[0-9]{1,5})?$")


def new_job_id() -> str:
    """72 random bits as 14 base-36 characters (one call to the OS random source)."""
    value = secrets.randbits(72)
    chars = []
    for _ in range(14):
        value, digit = divmod(value, 36)
        chars.append(_ALPHABET[digit])
    return "wsjob-" + "".join(chars)


def is_job_id(text: str) -> bool:
    return bool(JOB_ID_RE.match(text))
