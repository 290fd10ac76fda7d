"""Exactly the same result across an interruption, for each model and optimizer and more than
one CS-2: a job restarted after a CS-2 replica is SIGKILLed, or preempted and resumed, ends with
the weights, optimizer state and every logged metric of an uninterrupted run of the same spec,
bit for bit (same machine). fc_mnist with SGD on 1 and 4 CS-2s is in test_restart_policy.py and
test_preemption.py; here GPT with AdamW on 1 and 2 CS-2s, and fc_mnist with SGD on 2."""

from __future__ import annotations

import copy
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.client import ApplianceClient
from appliance.domain.phases import Phase
from tests.integration.coordinator.harness import RunningCoordinator, serving, wait_until
from tests.integration.coordinator.same_run import assert_same_run
from tests.model_specs import ADAMW, FC, GPT, SGD

# Enough steps that the interruption lands well before the last one (a victim at its last step
# is left to finish instead): a run's timeline had GPT (about 40 steps/s) killed by step 90 and
# checkpointed for the preemption at step 93, fc_mnist (about 90 steps/s) at step 100; these
# leave 3 and 6 times that.
STEPS = {"gpt": 300, "fc": 600}


def _params(model: dict[str, Any], optimizer: dict[str, Any]) -> dict[str, Any]:
    params = copy.deepcopy(model)
    params["optimizer"] = optimizer
    params["runconfig"] = {**params["runconfig"], "checkpoint_steps": 50, "log_steps": 5}
    return params


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCoordinator]:
    data = tmp_path_factory.mktemp("exact") / "data"
    with serving(data, restart_backoff_seconds=0.0) as running:
        yield running


@pytest.mark.parametrize(
    ("model", "optimizer", "num_csx", "interruption"),
    [
        pytest.param(GPT, ADAMW, 2, "killed", id="gpt-adamw-2cs2-killed"),
        pytest.param(GPT, ADAMW, 1, "preempted", id="gpt-adamw-1cs2-preempted"),
        pytest.param(FC, SGD, 2, "preempted", id="fc-sgd-2cs2-preempted"),
    ],
)
def test_an_interrupted_run_ends_exactly_as_an_uninterrupted_one(
    coordinator: RunningCoordinator,
    model: dict[str, Any],
    optimizer: dict[str, Any],
    num_csx: int,
    interruption: str,
) -> None:
    params = _params(model, optimizer)
    steps = STEPS["fc" if model is FC else "gpt"]
    with ApplianceClient(coordinator.address, detach=True) as client:
        reference = client.submit(params=params, num_csx=num_csx, num_steps=steps)
        uninterrupted = reference.wait(timeout=120)
        assert uninterrupted.phase is Phase.SUCCEEDED, uninterrupted.reason

        job = client.submit(
            params=params, num_csx=num_csx, num_steps=steps, priority="p3", max_restarts=1
        )
        wait_until(lambda: job.status.progress.step >= 70, 120, "a checkpoint to be written")
        if interruption == "killed":
            os.kill(next(r.pid for r in job.status.replicas if r.name == "cs2-0"), signal.SIGKILL)
        else:
            urgent = client.submit(params=params, num_csx=4, num_steps=5, priority="p1")
            assert urgent.wait(timeout=150).phase is Phase.SUCCEEDED
        final = job.wait(timeout=150)

    assert final.phase is Phase.SUCCEEDED, final.reason
    first, second = final.attempts
    assert first.ended_in is Phase.QUEUED and second.resumed_from >= 50, first.reason
    assert_same_run(Path(final.spec.model_dir), Path(uninterrupted.spec.model_dir), steps)
