"""Time limits end to end on a live coordinator with real local replicas: a job with a short
--time runs to its limit, its chief is asked for a checkpoint and writes it, and the job ends
TIMEOUT (ReasonCode TimeLimit) with that checkpoint in its model dir; a job over its queue's
maximum is refused at the door naming both, nothing stored."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.client import ApplianceClient, JobTimedOut
from appliance.domain.errors import InvalidSpec
from appliance.domain.phases import Phase
from appliance.domain.reasons import ReasonCode
from tests.integration.coordinator.harness import RunningCoordinator, serving

PARAMS = {
    "model": {"name": "fc_mnist", "hidden_sizes": [32]},
    "optimizer": {"optimizer_type": "sgd", "learning_rate": 0.05},
    "runconfig": {"checkpoint_steps": 1_000_000, "log_steps": 10, "seed": 5},
}


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[RunningCoordinator]:
    with serving(tmp_path / "data", time_limit_grace_seconds=30.0) as running:
        yield running


def test_a_job_at_its_time_limit_checkpoints_and_ends_timeout(
    coordinator: RunningCoordinator,
) -> None:
    with ApplianceClient(coordinator.address, detach=True) as client:
        handle = client.submit(params=PARAMS, num_csx=1, num_steps=5_000_000, time_limit="0:03")
        with pytest.raises(JobTimedOut) as ended:
            handle.wait(timeout=120)
        events = handle.events()
        client.set_queue("default", max_time_limit="1:00:00")
        with pytest.raises(InvalidSpec) as refused:
            client.submit(params=PARAMS, num_csx=1, num_steps=5, time_limit="2:00:00")
        listed = client.list_jobs(all=True)
    job = ended.value.job
    assert (job.phase, job.reason_code) == (Phase.TIMEOUT, ReasonCode.TIME_LIMIT.value)
    assert job.spec.time_limit == "00:00:03"
    written = re.search(r"checkpointed at step (\d+)", job.reason)
    assert written, job.reason
    step = int(written[1])
    assert step > 0 and (Path(job.spec.model_dir) / f"checkpoint_{step}.npz").exists()
    assert any("asked for a checkpoint within 30 s" in e.reason for e in events)
    assert job.finished_at - job.started_at >= 3  # it ran its limit, no less
    assert refused.value.field == "time_limit" and "01:00:00" in refused.value.message
    assert [j.id for j in listed] == [job.id]  # the refused one was not stored
