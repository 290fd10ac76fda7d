"""A pipelined job through the coordinator: a gang of a chief and one CS-2 (no MemoryX, no
SwarmX), started by the local backend, resumed exactly after a preemption or a killed CS-2."""

from __future__ import annotations

import copy
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.client import ApplianceClient
from appliance.domain.job import Job
from appliance.domain.phases import Phase
from tests.integration.coordinator.harness import RunningCoordinator, serving, wait_until
from tests.integration.coordinator.same_run import assert_same_run
from tests.model_specs import ADAMW, GPT

# Enough steps that the interruption lands well before the last one (a pipelined GPT step
# moves no weights: about 200 steps a second here; a run's timeline had the kill land by step
# 100 and the preemption's checkpoint at step 150, so 1000 leaves over 6 times that).
STEPS = 1000
PARAMS = copy.deepcopy(GPT)
PARAMS["optimizer"] = ADAMW
PARAMS["runconfig"] = {
    **PARAMS["runconfig"],
    "checkpoint_steps": 50,
    "log_steps": 25,
    "execution_strategy": "pipeline",
}


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCoordinator]:
    data = tmp_path_factory.mktemp("pipelined") / "data"
    with serving(data, restart_backoff_seconds=0.0) as running:
        yield running


@pytest.fixture(scope="module")
def uninterrupted(coordinator: RunningCoordinator) -> Job:
    """The run nobody interrupted, trained once for both interruptions: the same spec on the
    same machine gives the same numbers bit for bit, so one reference serves them both."""
    with ApplianceClient(coordinator.address, detach=True) as client:
        return client.submit(params=PARAMS, num_csx=1, num_steps=STEPS).wait(timeout=120)


@pytest.mark.parametrize("interruption", ["killed", "preempted"])
def test_a_pipelined_job_is_two_replicas_and_resumes_exactly(
    coordinator: RunningCoordinator, uninterrupted: Job, interruption: str
) -> None:
    assert uninterrupted.phase is Phase.SUCCEEDED, uninterrupted.reason
    assert sorted(r.name for r in uninterrupted.replicas) == ["chief-0", "cs2-0"]
    with ApplianceClient(coordinator.address, detach=True) as client:
        job = client.submit(
            params=PARAMS, num_csx=1, num_steps=STEPS, priority="p3", max_restarts=1
        )
        wait_until(lambda: job.status.progress.step >= 70, 60, "a checkpoint to be written")
        if interruption == "killed":
            os.kill(next(r.pid for r in job.status.replicas if r.name == "cs2-0"), signal.SIGKILL)
        else:  # a job of every system takes this one's
            urgent = client.submit(params=PARAMS | {"runconfig": {}}, num_csx=4, num_steps=5,
                                   priority="p1")  # fmt: skip
            assert urgent.wait(timeout=120).phase is Phase.SUCCEEDED
        final = job.wait(timeout=150)

    assert final.phase is Phase.SUCCEEDED, final.reason
    first, second = final.attempts
    assert first.ended_in is Phase.QUEUED and second.resumed_from >= 50, first.reason
    assert_same_run(Path(final.spec.model_dir), Path(uninterrupted.spec.model_dir), STEPS)
