"""Readiness: whether the coordinator can do its work now (the store answers, the backend can
start and watch replicas), and if not, why, in a sentence."""

from __future__ import annotations

from collections.abc import Sequence

from appliance.backends.base import Backend
from appliance.services.context import Context

MAX_PROBLEM = 200


class Readiness:
    """What /readyz answers: a probe of the store on its writer (where submits wait) and the
    backend's own health."""

    def __init__(self, ctx: Context, backend: Backend, warnings: Sequence[str] = ()) -> None:
        self.ctx = ctx
        self.backend = backend
        # Found at start; they do not make the coordinator unready.
        self.warnings = tuple(warnings)

    async def problem(self) -> str | None:
        """None when ready; else what is wrong (a standby is never ready, so a Service
        sends its traffic to the leader; then the store, then the backend)."""
        standby = self.ctx.leadership.problem()
        if standby is not None:
            return standby
        try:
            await self.ctx.db(self.ctx.store.phase_of, "wsjob-readinessprobe")
        except Exception as exc:  # the store is down: not ready, and say why
            return str(exc)[:MAX_PROBLEM] or type(exc).__name__
        problem = self.backend.health()
        return problem[:MAX_PROBLEM] if problem else None
