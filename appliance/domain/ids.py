"""Job identifiers: `wsjob-` followed by 14 lowercase base-36 characters."""

from __future__ import annotations

import re
import secrets
import string

_ALPHABET = string.digits + string.ascii_lowercase
JOB_ID_RE = re.compile(r"^wsjob-[0-9a-z]{12,40}$")


def new_job_id() -> str:
    return "wsjob-" + "".join(secrets.choice(_ALPHABET) for _ in range(14))


def is_job_id(text: str) -> bool:
    return bool(JOB_ID_RE.match(text))
