"""Before a job's replicas start, the owner's directory is there with its mode (0750): made at
the owner's first submit, and made again by the launch if it went since (a replica would make
it with a wider mode). Backends whose replicas write no model dirs (the simulated one) skip it."""

from __future__ import annotations

import dataclasses
import stat
from collections.abc import Sequence
from pathlib import Path

import pytest

from appliance.domain.job import Job, Replica
from appliance.loops.reconciling import Reconciler
from appliance.loops.scheduling import SchedulerLoop
from appliance.services.context import Context
from appliance.services.model_dirs import ModelDirs
from appliance.services.replicas import ReplicaService
from tests.unit.harness import NOW, create, new_jobs
from tests.unit.loops.test_reconciling import JOB, RecordingBackend


@pytest.mark.parametrize("writes", [True, False])
async def test_a_launch_makes_the_owners_directory_first(
    ctx: Context, tmp_path: Path, writes: bool
) -> None:
    dirs = ModelDirs(tmp_path / "root")
    owner = dirs.user_dir("alice")
    (job,) = new_jobs([JOB])
    job = dataclasses.replace(job, spec=dataclasses.replace(job.spec, model_dir=str(owner / JOB)))
    create(ctx, [job], NOW)
    assert await SchedulerLoop(ctx).run_once() == 1
    backend = RecordingBackend()
    backend.writes_model_dirs = writes
    there: list[bool] = []
    launch = backend.launch

    async def launch_seeing(job: Job, replicas: Sequence[Replica]) -> None:
        there.append(owner.is_dir())
        await launch(job, replicas)

    backend.launch = launch_seeing  # type: ignore[method-assign]
    await Reconciler(ctx, backend, ReplicaService(ctx), model_dirs=dirs).sweep(timed=False)
    assert there == [writes]
    if writes:
        assert stat.S_IMODE(owner.stat().st_mode) == 0o750
