"""Failures the simulated backend injects (APPLIANCE_SIM_FAIL_AT), parsed: pure and checked.

`REPLICA@STEP[,REPLICA@STEP...]`, e.g. `cs2-0@150`: in every job that has that replica, the
replica is killed (exit 137, as by SIGKILL) once the job has done STEP steps, on the job's
first attempt only, so the restart that follows succeeds. A job that ends before STEP never
sees it. (The per-job step time label is part of the spec: domain/spec.py.)
"""

from __future__ import annotations

import dataclasses
import re

from appliance.domain.plan import Role

MAX_FAIL_AT = 64
_ROLES = "|".join(role.value for role in Role)
_FAIL_AT_RE = re.compile(rf"^(?P<replica>(?:{_ROLES})-[0-9]{{1,5}})@(?P<step>[0-9]{{1,10}})$")


@dataclasses.dataclass(frozen=True)
class FailAt:
    """Kill `replica` once its job has done `step` steps (first attempt only)."""

    replica: str
    step: int


def parse_fail_at(text: str) -> tuple[FailAt, ...]:
    """The failures `text` names (empty: none); ValueError naming the first bad entry."""
    entries = [part.strip() for part in text.split(",") if part.strip()]
    if len(entries) > MAX_FAIL_AT:
        raise ValueError(f"at most {MAX_FAIL_AT} REPLICA@STEP entries are allowed")
    failures = []
    for entry in entries:
        match = _FAIL_AT_RE.match(entry)
        if match is None:
            raise ValueError(
                f"{entry!r} is not REPLICA@STEP with REPLICA one of {_ROLES.replace('|', ', ')} "
                "and an index, e.g. cs2-0@150"
            )
        failures.append(FailAt(match["replica"], int(match["step"])))
    replicas = [f.replica for f in failures]
    twice = sorted({r for r in replicas if replicas.count(r) > 1})
    if twice:
        raise ValueError(f"{', '.join(twice)} named more than once; a replica fails once")
    return tuple(failures)
