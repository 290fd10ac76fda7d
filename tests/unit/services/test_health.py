"""Readiness: ready while the store answers and the backend is healthy; otherwise one sentence
saying which is not."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from appliance.backends.base import OptionalParts
from appliance.services.context import Context
from appliance.services.health import MAX_PROBLEM, Readiness
from appliance.store.engine import make_engine
from appliance.store.jobs import JobStore


class Backend(OptionalParts):
    def __init__(self, problem: str | None) -> None:
        self.problem = problem

    def health(self) -> str | None:
        return self.problem


async def test_ready_until_the_backend_or_the_store_is_not(ctx: Context, tmp_path: Path) -> None:
    backend = Backend(None)
    assert await Readiness(ctx, backend).problem() is None  # type: ignore[arg-type]
    backend.problem = "the Kubernetes API answers 503 " * 20
    said = await Readiness(ctx, backend).problem()  # type: ignore[arg-type]
    assert said is not None and said.startswith("the Kubernetes API") and len(said) == MAX_PROBLEM

    nowhere = make_engine(f"sqlite:///{tmp_path / 'no-such-dir' / 'jobs.db'}")
    gone = dataclasses.replace(ctx, store=JobStore(nowhere))
    said = await Readiness(gone, Backend(None)).problem()  # type: ignore[arg-type]
    assert said is not None and said.startswith("the job store is unavailable"), said
    nowhere.dispose()
