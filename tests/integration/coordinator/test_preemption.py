"""A job of higher priority preempts a running one: the victim's chief checkpoints at once, the
gang is torn down, the job goes back to the queue and its next attempt resumes from exactly
that checkpoint, ending with the weights, optimizer state and losses of a run nobody
interrupted (the issue's first check, on the embedded default's 4 systems)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.client import ApplianceClient
from appliance.domain.phases import Phase
from tests.integration.coordinator.harness import RunningCoordinator, serving, wait_until
from tests.integration.coordinator.same_run import assert_same_run

# Enough steps that the preemption lands well before the last one: a run's timeline had the
# victim checkpoint at step 95 (about 80 steps/s on 4 systems), so 600 leave over 6 times that.
STEPS = 600
PARAMS = {
    "model": {"name": "fc_mnist", "hidden_sizes": [32]},
    "optimizer": {"optimizer_type": "sgd", "learning_rate": 0.05, "momentum": 0.9},
    "runconfig": {"checkpoint_steps": 400, "log_steps": 10, "seed": 5},
}
SHORT = {**PARAMS, "runconfig": {"checkpoint_steps": 100, "seed": 6}}


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[RunningCoordinator]:
    with serving(tmp_path / "data") as running:
        yield running


def test_a_p1_job_preempts_a_p3_job_which_resumes_exactly_where_it_was_stopped(
    coordinator: RunningCoordinator,
) -> None:
    with ApplianceClient(coordinator.address, detach=True) as client:
        reference = client.submit(params=PARAMS, num_csx=4, num_steps=STEPS, priority="p3")
        uninterrupted = reference.wait(timeout=120)
        assert uninterrupted.phase is Phase.SUCCEEDED, uninterrupted.reason

        victim = client.submit(params=PARAMS, num_csx=4, num_steps=STEPS, priority="p3")
        wait_until(lambda: victim.status.progress.step >= 50, 120, "the P3 job to train")
        urgent = client.submit(params=SHORT, num_csx=2, num_steps=200, priority="p1")
        done = urgent.wait(timeout=150)
        assert done.phase is Phase.SUCCEEDED, done.reason
        final = victim.wait(timeout=150)
        events = victim.events()

    assert final.phase is Phase.SUCCEEDED, final.reason
    assert final.attempt == 2 and final.restarts == 1
    reasons = [e.reason for e in events]
    asked = f"preempted by {urgent.id} (P1); asked for a checkpoint within 30 s"
    assert asked in reasons, reasons
    requeue = next(e for e in events if e.to_phase is Phase.QUEUED and e.from_phase)
    written = re.fullmatch(
        rf"preempted by {urgent.id} \(P1\); checkpointed at step (\d+); requeued at position 2",
        requeue.reason,
    )
    assert written, requeue.reason
    step = int(written[1])
    # Not from step 0, and not from the periodic checkpoint before: from where it stopped.
    first, second = final.attempts
    assert step >= 50 and step % 400 != 0
    assert (first.resumed_from, second.resumed_from) == (0, step)
    assert first.reason == requeue.reason and first.ended_in is Phase.QUEUED
    # The P1 job ran while the P3 job waited: it started before the P3 job's second attempt.
    assert done.started_at < second.scheduled_at

    mine, theirs = Path(final.spec.model_dir), Path(uninterrupted.spec.model_dir)
    assert (mine / f"checkpoint_{step}.npz").exists()
    assert_same_run(mine, theirs, STEPS)
