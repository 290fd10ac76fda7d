"""Job dependencies, as in Slurm: a job waits in the queue until the jobs it depends on end.

`afterok` (the default): the other job SUCCEEDED. `afterany`: it ended, however. `afternotok`:
it FAILED, was CANCELLED or ran out of time (TIMEOUT). A dependency that can no longer be met
(an `afterok` one FAILED, an `afternotok` one SUCCEEDED) cancels the waiting job, naming it; so
a chain of jobs ends as soon as a link of it breaks. A job may only depend on jobs that already
exist, so no cycle can ever be made.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from typing import Any

from appliance.domain.errors import InvalidSpec
from appliance.domain.ids import is_job_id
from appliance.domain.phases import TERMINAL, Phase
from appliance.domain.reasons import Reason, ReasonCode, said

MAX_DEPENDENCIES = 64


class Condition(enum.StrEnum):
    AFTEROK = "afterok"
    AFTERANY = "afterany"
    AFTERNOTOK = "afternotok"

    def met_by(self, phase: Phase) -> bool:
        if self is Condition.AFTEROK:
            return phase is Phase.SUCCEEDED
        if self is Condition.AFTERNOTOK:
            return phase in (Phase.FAILED, Phase.CANCELLED, Phase.TIMEOUT)
        return phase in TERMINAL

    def broken_by(self, phase: Phase) -> bool:
        """The other job ended in a way that can never meet the condition."""
        return phase in TERMINAL and not self.met_by(phase)

    @property
    def met_as(self) -> str:
        """How the other job had to end, as after "only after it": "succeeded"."""
        return {
            Condition.AFTEROK: "succeeded",
            Condition.AFTERANY: "ended",
            Condition.AFTERNOTOK: "failed, was cancelled or timed out",
        }[self]

    @property
    def wanted(self) -> str:
        """What the waiting job waits for, as a sentence ends: "to succeed"."""
        return {
            Condition.AFTEROK: "to succeed",
            Condition.AFTERANY: "to end",
            Condition.AFTERNOTOK: "to fail, be cancelled or time out",
        }[self]


@dataclasses.dataclass(frozen=True)
class Dependency:
    job_id: str
    condition: Condition = Condition.AFTEROK

    def __str__(self) -> str:
        return f"{self.condition}:{self.job_id}"


@dataclasses.dataclass(frozen=True)
class DependencyState:
    """A queued job's dependency on another, and the phase that other job is in (None: it no
    longer exists)."""

    job_id: str
    depends_on: str
    condition: Condition
    phase: Phase | None


def verdicts(states: Iterable[DependencyState]) -> tuple[dict[str, Reason], dict[str, Reason]]:
    """(waiting, broken): the queued jobs still waiting for a dependency (DEPENDENCY) and the
    ones whose dependency can no longer be met, to be cancelled (DEPENDENCY_FAILED), each
    with the reason naming it."""
    waiting: dict[str, Reason] = {}
    broken: dict[str, Reason] = {}
    for dep in states:
        if dep.phase is None or dep.condition.broken_by(dep.phase):
            ended = dep.phase.value if dep.phase is not None else "gone"
            broken.setdefault(
                dep.job_id,
                said(
                    ReasonCode.DEPENDENCY_FAILED, job=dep.depends_on, ended=ended,
                    met_as=dep.condition.met_as,
                ),
            )  # fmt: skip
        elif not dep.condition.met_by(dep.phase):
            waiting.setdefault(
                dep.job_id,
                said(
                    ReasonCode.DEPENDENCY, job=dep.depends_on, phase=dep.phase.value,
                    wanted=dep.condition.wanted,
                ),
            )  # fmt: skip
    return {j: r for j, r in waiting.items() if j not in broken}, broken


def parse_dependency(value: Any) -> tuple[Dependency, ...]:
    """`wsjob-…` (afterok), `afterany:wsjob-…`, Slurm's `afterok:wsjob-a:wsjob-b` (one
    condition, several jobs), or a Dependency; InvalidSpec naming depends_on otherwise."""
    if isinstance(value, Dependency):
        return (value,)
    if not isinstance(value, str) or len(value) > 2000:
        raise InvalidSpec(
            f"a dependency must be a job id, optionally after afterok:, afterany: or "
            f"afternotok:, got {str(value)[:80]!r}",
            field="depends_on",
        )
    head, *ids = value.strip().split(":")
    if not ids:
        head, ids = Condition.AFTEROK.value, [head]
    try:
        condition = Condition(head)
    except ValueError:
        raise InvalidSpec(
            f"dependency condition {head[:40]!r} is not one of afterok, afterany, afternotok",
            field="depends_on",
        ) from None
    for job_id in ids:
        if not is_job_id(job_id):
            raise InvalidSpec(f"dependency {job_id[:80]!r} is not a job id", field="depends_on")
    return tuple(Dependency(job_id, condition) for job_id in ids)


def parse_dependencies(values: Iterable[Any] | None) -> tuple[Dependency, ...]:
    if values is None:
        return ()
    if isinstance(values, str):
        values = [values]
    values = [part for v in values for part in (v.split(",") if isinstance(v, str) else [v])]
    values = [v for v in values if not isinstance(v, str) or v.strip()]
    if len(values) > MAX_DEPENDENCIES:
        raise InvalidSpec(
            f"a job may depend on at most {MAX_DEPENDENCIES} jobs, got {len(values)}",
            field="depends_on",
        )
    parsed = [d for v in values for d in parse_dependency(v)]
    if len(parsed) > MAX_DEPENDENCIES:
        raise InvalidSpec(
            f"a job may depend on at most {MAX_DEPENDENCIES} jobs, got {len(parsed)}",
            field="depends_on",
        )
    ids = [d.job_id for d in parsed]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise InvalidSpec(f"depends on {', '.join(twice)} twice", field="depends_on")
    return tuple(parsed)
